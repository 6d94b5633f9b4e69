package agent

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/pcapsync/pcapsync/internal/fielderr"

	"github.com/pcapsync/pcapsync/internal/capture"
	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/kafkaconn"
	"github.com/pcapsync/pcapsync/internal/liveness"
	"github.com/pcapsync/pcapsync/internal/observe"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// Config configures an agent. The zero value of each field but
// Collectors (or Kafka), and one of Interfaces or ReadFile, means its
// default.
type Config struct {
	// Collectors are the addresses of the collectors, HOST:PORT or HOST
	// for wire.DefaultPort, at least one and at most MaxCollectors, each
	// once; required. Each is resolved once, by New. Over TCP the agent
	// stays with the collector it is connected to and moves on to the
	// next in the list (round robin) when a connection to it cannot be
	// made or is lost; over UDP it moves on when the collector's host
	// reports the port closed or unreachable (see udp.go).
	Collectors []string
	// Kafka, if set, replaces the collectors: every batch is produced
	// straight to its topic as the record an ingest collector would
	// produce for it, and Kafka's acknowledgement releases it (see
	// kafka.go). It excludes Collectors, the UDP transport, MTU, TLS,
	// Insecure and Token: no collector checks a token, the brokers'
	// own TLS and SASL (Kafka's fields) authenticate the agent.
	Kafka *kafkaconn.Config
	// Name is the agent's name, its directory on the collector. ""
	// means the name of the client certificate in TLS, or with Kafka in
	// Kafka.CertFile (its CN, or else its first DNS name that is an
	// agent name: what the collector checks the name against), and
	// without one the host name.
	Name       string
	Interfaces []string // capture live from these
	ReadFile   string   // or replay this pcap/pcapng file

	Filter    string // tcpdump syntax
	SnapLen   int    // 0 means DefaultSnapLen
	NoPromisc bool   // zero value: promiscuous, like tcpdump
	// RingSize is the bytes of each interface's capture ring, all of
	// them resident; 0 sizes it by RingTime (capture.Config.RingTime).
	RingSize int
	// RingTime sizes each ring to hold a stall of the agent this long
	// at capture.DesignPacketRate frames of capture.DesignFrameSize
	// bytes. 0 means DefaultRingTime; it excludes RingSize.
	RingTime time.Duration
	// BlockSize is the capture ring's block size; a packet longer than
	// BlockSize-capture.BlockOverhead is cut, and the snaplen in effect
	// is that when a block is too small for capture.LargestFrame
	// (capture.Config.SnapLen). 0 means DefaultBlockSize, which keeps
	// the default snaplen; at most capture.MaxBlockSize.
	BlockSize int

	// MaxRate limits live capture to this many packets per second,
	// shared evenly by the interfaces; packets over it are dropped and
	// counted. Over UDP it also paces a file replay (which then waits
	// instead of dropping), since nothing else slows a replay down there.
	// 0 means no limit.
	MaxRate int

	// Compress compresses every batch's records (see compress.Spec: a
	// codec compress.Batches allows); the zero value sends them as they
	// are.
	Compress compress.Spec
	// Checksum says which batches carry a CRC-32C (wire.FlagUnchecked);
	// the zero value is ChecksumAuto.
	Checksum Checksum
	// Transport is TransportTCP ("" means it: DefaultTransport) or
	// TransportUDP: batches in datagrams that fit MTU, no
	// acknowledgement, no resend (see udp.go). UDP needs Insecure and
	// excludes TLS, Spool, BatchBytes and ChecksumNever.
	Transport string
	// MTU is the path MTU UDP datagrams must fit (IPv4: MTU - 28 bytes of
	// batch frame, IPv6: MTU - 48). 0 means DefaultMTU; UDP only.
	MTU int

	// BatchBytes seals a batch before it would exceed this size.
	// 0 means DefaultBatchBytes. Over UDP the MTU sets it instead, and
	// BatchBytes must be 0.
	BatchBytes int
	// FlushInterval seals a non-empty live batch this long after its
	// first packet. 0 means DefaultFlushInterval.
	FlushInterval time.Duration
	// QueueBytes bounds the unacknowledged batches kept in memory.
	// 0 means DefaultQueueBytes. A replay (ReadFile) over TCP without a
	// Spool also reads at most replayAhead beyond what it has sent.
	QueueBytes int64
	// Spool, if set, is a directory where every sealed batch is also
	// written until acknowledged: QueueBytes then bounds only the copies
	// kept in memory, SpoolBytes bounds the queue, and a restarted agent
	// (live capture) resends what its previous run left unacknowledged.
	Spool string
	// SpoolBytes bounds the spool. 0 means DefaultSpoolBytes.
	SpoolBytes int64
	// StatsInterval is how often loss counters go to the collector.
	// 0 means DefaultStatsInterval.
	StatsInterval time.Duration
	// ShutdownTimeout bounds the wait for the last acknowledgements
	// after a stop signal. 0 means DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// DialTimeout bounds connect plus handshake. 0 means
	// DefaultDialTimeout.
	DialTimeout time.Duration
	// BackoffMin and BackoffMax bound the reconnect delay, which doubles
	// per failure with ±25% jitter. A connection that ends before the
	// collector acknowledged anything new is a failure too; the delay
	// starts again from BackoffMin only after one that did. 0 means
	// DefaultBackoffMin and DefaultBackoffMax.
	BackoffMin, BackoffMax time.Duration

	// TLS, if set, secures the connection (see pki.ClientConfig): the
	// collector's certificate is verified, against TLS.ServerName or, if
	// that is empty, the host part of the collector's address (each its
	// own). TLS 1.2 at least.
	TLS *tls.Config
	// Version is this agent's software version, told to a collector
	// that takes it (an Info frame after a Welcome with
	// wire.FeatureInfo, over TCP) and put in Kafka records; "" tells
	// none. Cut to wire.MaxVersionLen bytes, non-printable bytes
	// replaced by '?'.
	Version string
	// Token is the collector's shared secret, sent in the Hello, at most
	// wire.MaxTokenLen bytes; "" for none.
	Token string
	// Insecure allows plain TCP (TLS nil), also with a Token, and is
	// required by UDP. Exactly one of TLS and Insecure must be set.
	Insecure bool
	// Heartbeat: a ping goes to the collector when nothing was sent for
	// this long. 0 means liveness.DefaultHeartbeat.
	Heartbeat time.Duration
	// PeerTimeout: a connection on which the collector sent nothing (not
	// even its heartbeat) for this long is dropped and made anew; it is
	// also the socket's TCP_USER_TIMEOUT on Linux. 0 means
	// liveness.DefaultPeerTimeout.
	PeerTimeout time.Duration

	// AckLatency, if set, observes for every acknowledged batch the
	// seconds from its first write to a connection to its
	// acknowledgement (TCP only; a resend does not restart the clock).
	// Observe is called with the queue's lock held: it must be quick
	// and must not call back into the agent. A prometheus.Histogram fits.
	AckLatency observe.Observer

	Logger *slog.Logger // nil means slog.Default()
}

// Defaults of the zero fields of Config. A flag's default is the same
// value (cmd/pcapsync's TestAgentFlagDefaults checks it).
const (
	DefaultSnapLen         = 262144
	DefaultRingTime        = capture.DefaultRingTime
	DefaultBlockSize       = capture.DefaultBlockSize
	DefaultTransport       = TransportTCP
	DefaultMTU             = 1500 // Ethernet
	DefaultBatchBytes      = 1 << 20
	DefaultFlushInterval   = 50 * time.Millisecond
	DefaultQueueBytes      = 64 << 20
	DefaultSpoolBytes      = 1 << 30
	DefaultStatsInterval   = 10 * time.Second
	DefaultShutdownTimeout = 10 * time.Second
	DefaultDialTimeout     = 5 * time.Second
	DefaultBackoffMin      = 100 * time.Millisecond
	DefaultBackoffMax      = 5 * time.Second
	DefaultChecksum        = ChecksumAuto
)

// Limits Validate checks.
const (
	MinBatchBytes = 4 << 10
	MaxBatchBytes = 8 << 20
	MinMTU        = 576 // the least every IPv4 host must accept
	MaxMTU        = 65535
	MaxCollectors = 16 // each adds a clause to the capture filter
)

// Transports.
const (
	TransportTCP = "tcp"
	TransportUDP = "udp"
)

func (c *Config) withDefaults() (Config, error) {
	if err := c.Validate(); err != nil {
		return *c, err
	}
	d := *c
	if d.Name == "" {
		tc := d.TLS
		if k := d.Kafka; k != nil && k.CertFile != "" && k.KeyFile != "" {
			// The brokers' client certificate names the agent as the
			// collector's does.
			cert, err := tls.LoadX509KeyPair(k.CertFile, k.KeyFile)
			if err != nil {
				return d, fielderr.Errorf("agent: the Kafka client certificate: %w", err)
			}
			tc = &tls.Config{Certificates: []tls.Certificate{cert}}
		}
		name, err := certName(tc)
		if err != nil {
			return d, err
		}
		d.Name = name
	}
	if d.Name == "" {
		h, err := os.Hostname()
		if err != nil {
			return d, fielderr.Errorf("agent: no {agent.Name} given and the host name is unknown: %w", err)
		}
		if err := wire.ValidateName(h); err != nil {
			return d, fielderr.Errorf("agent: the host name is no agent name: %w (set {agent.Name})", err)
		}
		d.Name = h
	}
	d.Collectors = make([]string, len(c.Collectors))
	for i, s := range c.Collectors {
		d.Collectors[i] = withPort(s)
	}
	def := func(v *time.Duration, x time.Duration) {
		if *v == 0 {
			*v = x
		}
	}
	d.SnapLen = cmp.Or(d.SnapLen, DefaultSnapLen)
	d.BatchBytes = cmp.Or(d.BatchBytes, DefaultBatchBytes)
	d.QueueBytes = cmp.Or(d.QueueBytes, DefaultQueueBytes)
	d.SpoolBytes = cmp.Or(d.SpoolBytes, DefaultSpoolBytes)
	def(&d.FlushInterval, DefaultFlushInterval)
	def(&d.StatsInterval, DefaultStatsInterval)
	def(&d.ShutdownTimeout, DefaultShutdownTimeout)
	def(&d.DialTimeout, DefaultDialTimeout)
	def(&d.BackoffMin, DefaultBackoffMin)
	def(&d.BackoffMax, DefaultBackoffMax)
	def(&d.Heartbeat, liveness.DefaultHeartbeat)
	def(&d.PeerTimeout, liveness.DefaultPeerTimeout)
	d.Transport = cmp.Or(d.Transport, DefaultTransport)
	if d.Transport == TransportUDP {
		d.MTU = cmp.Or(d.MTU, DefaultMTU)
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	return d, nil
}

// certName returns the agent name tc's client certificate stands for:
// its Subject CN, or else the first of its DNS names that is an agent
// name; "" without a client certificate. A certificate that names no
// agent is an error: the collector would refuse every name.
func certName(tc *tls.Config) (string, error) {
	leaf := clientLeaf(tc)
	if leaf == nil {
		return "", nil
	}
	for _, n := range append([]string{leaf.Subject.CommonName}, leaf.DNSNames...) {
		if n != "" && wire.ValidateName(n) == nil {
			return n, nil
		}
	}
	return "", fielderr.Errorf("agent: no {agent.Name} given, and the client certificate names no agent (CN %q, DNS names %q; set {agent.Name})",
		leaf.Subject.CommonName, leaf.DNSNames)
}

// clientLeaf returns the client certificate tc presents, parsed, or nil.
func clientLeaf(tc *tls.Config) *x509.Certificate {
	if tc == nil {
		return nil
	}
	var cert *tls.Certificate
	switch {
	case tc.GetClientCertificate != nil:
		c, err := tc.GetClientCertificate(&tls.CertificateRequestInfo{})
		if err != nil {
			return nil
		}
		cert = c
	case len(tc.Certificates) > 0:
		cert = &tc.Certificates[0]
	}
	if cert == nil || len(cert.Certificate) == 0 {
		return nil
	}
	if cert.Leaf != nil {
		return cert.Leaf
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil
	}
	return leaf
}

// Checksum is the choice of --checksum.
type Checksum uint8

const (
	// ChecksumAuto: a checksum unless TLS authenticates every byte
	// already and no spool keeps batches on disk.
	ChecksumAuto Checksum = iota
	// ChecksumAlways: every batch carries CRC-32C (for a collector
	// behind a TLS-terminating proxy, where the last hop is plain).
	ChecksumAlways
	// ChecksumNever: no batch does (TCP only; the collector accepts it).
	ChecksumNever
)

var checksumNames = [...]string{"auto", "always", "never"}

func (c Checksum) String() string {
	if int(c) < len(checksumNames) {
		return checksumNames[c]
	}
	return fmt.Sprintf("checksum(%d)", uint8(c))
}

// MarshalText returns c's name, for flags and configuration files.
func (c Checksum) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText parses a name as ParseChecksum does.
func (c *Checksum) UnmarshalText(b []byte) error {
	v, err := ParseChecksum(string(b))
	if err != nil {
		return err
	}
	*c = v
	return nil
}

// ParseChecksum parses auto, always or never.
func ParseChecksum(s string) (Checksum, error) {
	for i, n := range checksumNames {
		if s == n {
			return Checksum(i), nil
		}
	}
	return 0, fmt.Errorf("checksum %q is not one of auto, always, never", s)
}

// unchecked reports whether batches go without a checksum.
func (c *Config) unchecked() bool {
	switch c.Checksum {
	case ChecksumNever:
		return true
	case ChecksumAuto:
		return c.TLS != nil && c.Transport != TransportUDP && c.Spool == ""
	}
	return false
}

// Validate reports the first unusable setting, naming its field
// (fielderr: "SnapLen"; cmd/pcapsync shows the flag). It is the one place every rule is checked; New
// calls it. Zero fields are valid (they mean the defaults).
func (c *Config) Validate() error {
	udp := c.Transport == TransportUDP
	batch := cmp.Or(c.BatchBytes, DefaultBatchBytes)
	if c.Kafka != nil {
		if err := c.validateKafka(); err != nil {
			return err
		}
	}
	switch {
	case len(c.Collectors) == 0 && c.Kafka == nil:
		return fielderr.Errorf("agent: collector address is required ({agent.Collectors}), or brokers to produce to ({agent.Kafka})")
	case len(c.Collectors) > MaxCollectors:
		return fielderr.Errorf("agent: %d collector addresses, at most %d ({agent.Collectors})", len(c.Collectors), MaxCollectors)
	case len(c.Interfaces) == 0 && c.ReadFile == "":
		return fielderr.Errorf("agent: give interfaces to capture from ({agent.Interfaces}) or a file to read ({agent.ReadFile})")
	case len(c.Interfaces) > 0 && c.ReadFile != "":
		return errors.New("agent: interfaces and a file to read are mutually exclusive")
	case len(c.Interfaces) > wire.MaxInterfaces:
		return fmt.Errorf("agent: %d interfaces, at most %d", len(c.Interfaces), wire.MaxInterfaces)
	case c.SnapLen < 0 || c.SnapLen > DefaultSnapLen:
		return fielderr.Errorf("agent: snaplen %d out of range 1..%d ({agent.SnapLen})", c.SnapLen, DefaultSnapLen)
	case c.Transport != "" && c.Transport != TransportTCP && !udp:
		return fielderr.Errorf("agent: transport %q: want %s or %s ({agent.Transport})", c.Transport, TransportTCP, TransportUDP)
	case udp && (c.TLS != nil || !c.Insecure):
		return fielderr.Errorf("agent: UDP is plaintext (no DTLS): set Insecure ({agent.Insecure}), and no TLS ({agent.TLS}); TLS needs the TCP transport")
	case udp && c.BatchBytes != 0:
		return fielderr.Errorf("agent: a batch size ({agent.BatchBytes}) does not apply to the UDP transport: a batch is one datagram, sized by the MTU ({agent.MTU})")
	case udp && c.Spool != "":
		return fielderr.Errorf("agent: a spool ({agent.Spool}) keeps batches until acknowledged, and UDP acknowledges nothing: use the TCP transport")
	case udp && c.Checksum == ChecksumNever:
		return fielderr.Errorf("agent: UDP batches always carry a checksum (datagrams have no TLS): {agent.Checksum} never needs the TCP transport")
	case !udp && c.MTU != 0:
		return fielderr.Errorf("agent: an MTU ({agent.MTU}) applies to the UDP transport only")
	case c.MTU != 0 && (c.MTU < MinMTU || c.MTU > MaxMTU):
		return fielderr.Errorf("agent: MTU %d out of range %d..%d ({agent.MTU})", c.MTU, MinMTU, MaxMTU)
	case c.BatchBytes != 0 && (c.BatchBytes < MinBatchBytes || c.BatchBytes > MaxBatchBytes):
		return fielderr.Errorf("agent: batch size %d out of range 4KiB..8MiB ({agent.BatchBytes})", c.BatchBytes)
	case c.QueueBytes < 0 || c.QueueBytes != 0 && c.QueueBytes < int64(max(batch, DefaultBatchBytes)):
		return fielderr.Errorf("agent: queue size %d smaller than one batch (%d) ({agent.QueueBytes})", c.QueueBytes, max(batch, DefaultBatchBytes))
	case c.RingSize < 0 || c.RingTime < 0 || c.BlockSize < 0:
		return errors.New("agent: ring size, ring time and block size must not be negative")
	case c.RingSize != 0 && c.RingTime != 0:
		return fielderr.Errorf("agent: a ring size ({agent.RingSize}) and a ring time ({agent.RingTime}) exclude each other")
	case c.BlockSize > capture.MaxBlockSize:
		return fielderr.Errorf("agent: block size %d above %d ({agent.BlockSize})", c.BlockSize, capture.MaxBlockSize)
	case c.MaxRate < 0:
		return fielderr.Errorf("agent: max rate %d packets/s is negative ({agent.MaxRate})", c.MaxRate)
	case c.SpoolBytes < 0 || c.SpoolBytes > 0 && c.SpoolBytes < int64(max(batch, DefaultBatchBytes)):
		return fielderr.Errorf("agent: spool size %d smaller than one batch ({agent.SpoolBytes})", c.SpoolBytes)
	case c.FlushInterval < 0 || c.StatsInterval < 0 || c.ShutdownTimeout < 0 || c.DialTimeout < 0 || c.BackoffMin < 0 || c.BackoffMax < 0:
		return errors.New("agent: durations must not be negative")
	case c.Heartbeat < 0 || c.PeerTimeout < 0:
		return errors.New("agent: durations must not be negative")
	case c.TLS != nil && c.Insecure:
		return fielderr.Errorf("agent: TLS ({agent.TLS}) and Insecure ({agent.Insecure}) exclude each other")
	case c.TLS == nil && !c.Insecure && c.Kafka == nil:
		return fielderr.Errorf("agent: %w: set TLS ({agent.TLS}), or Insecure ({agent.Insecure}) for plain TCP", ErrNoSecurity)
	case c.Checksum > ChecksumNever:
		return fielderr.Errorf("agent: %s is not one of auto, always, never ({agent.Checksum})", c.Checksum)
	case compress.Batches.Check(c.Compress) != nil:
		return fielderr.Errorf("agent: %w ({agent.Compress})", compress.Batches.Check(c.Compress))
	case len(c.Token) > wire.MaxTokenLen:
		return fielderr.Errorf("agent: token of %d bytes, at most %d ({agent.Token})", len(c.Token), wire.MaxTokenLen)
	}
	if hb, pt := cmp.Or(c.Heartbeat, liveness.DefaultHeartbeat), cmp.Or(c.PeerTimeout, liveness.DefaultPeerTimeout); hb >= pt {
		return fielderr.Errorf("agent: heartbeat %s must be shorter than the peer timeout %s ({agent.Heartbeat}, {agent.PeerTimeout})", hb, pt)
	}
	if c.Name != "" {
		if err := wire.ValidateName(c.Name); err != nil {
			return fielderr.Errorf("agent: %w (set {agent.Name})", err)
		}
	}
	addrs := map[string]bool{}
	for _, s := range c.Collectors {
		if err := checkCollector(s); err != nil {
			return fielderr.Errorf("agent: collector address %q: %w ({agent.Collectors})", s, err)
		}
		a := withPort(s)
		if addrs[a] {
			return fielderr.Errorf("agent: collector address %q given twice ({agent.Collectors})", s)
		}
		addrs[a] = true
	}
	seen := map[string]bool{}
	for _, ifc := range c.Interfaces {
		if ifc == "" || len(ifc) > 255 || seen[ifc] {
			return fielderr.Errorf("agent: interface %q is empty, too long or repeated ({agent.Interfaces})", ifc)
		}
		seen[ifc] = true
	}
	return nil
}

// validateKafka checks what Kafka excludes, then Kafka itself.
func (c *Config) validateKafka() error {
	switch {
	case len(c.Collectors) > 0:
		return fielderr.Errorf("agent: collectors ({agent.Collectors}) and Kafka ({agent.Kafka}) exclude each other: batches go to one or the other")
	case c.Transport == TransportUDP:
		return fielderr.Errorf("agent: Kafka ({agent.Kafka}) takes batches over its own connections: {agent.Transport} udp does not apply")
	case c.MTU != 0:
		return fielderr.Errorf("agent: an MTU ({agent.MTU}) applies to the UDP transport only, not to Kafka ({agent.Kafka})")
	case c.Token != "":
		return fielderr.Errorf("agent: a token ({agent.Token}) is checked by a collector, and with Kafka ({agent.Kafka}) there is none: authenticate to the brokers with {agent.Kafka.CertFile} or {agent.Kafka.SASL}")
	case c.TLS != nil:
		return fielderr.Errorf("agent: {agent.TLS} secure the connection to a collector; to the brokers use the {agent.Kafka.TLS} flags")
	case c.Insecure:
		return fielderr.Errorf("agent: {agent.Insecure} allows plain TCP to a collector; with Kafka ({agent.Kafka}) the connection to the brokers is plain unless the {agent.Kafka.TLS} flags are given")
	}
	if err := c.Kafka.Validate(); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	return nil
}

// withPort returns the collector address s with wire.DefaultPort added
// when it has no port.
func withPort(s string) string {
	if _, _, err := net.SplitHostPort(s); err == nil {
		return s
	}
	return net.JoinHostPort(strings.Trim(s, "[]"), strconv.Itoa(wire.DefaultPort))
}

// checkCollector reports what makes s no collector address: empty, a
// list (a comma), white space, no host, no port after a colon, or a
// numeric port outside 1..65535. Whether the host (and a port given by
// name) resolves is New's to find out.
func checkCollector(s string) error {
	if s == "" || strings.ContainsAny(s, ", \t\n") {
		return errors.New("empty, or holds a comma or white space")
	}
	host, port, err := net.SplitHostPort(withPort(s))
	if err != nil {
		return err
	}
	if strings.Trim(host, "[]") == "" {
		return errors.New("no host")
	}
	if port == "" {
		return errors.New("no port after the colon")
	}
	if n, err := strconv.ParseUint(port, 10, 64); err == nil && (n == 0 || n > 65535) || err != nil && port[0] >= '0' && port[0] <= '9' {
		return fmt.Errorf("port %q: want a number in 1..65535", port)
	}
	return nil
}
