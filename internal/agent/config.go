package agent

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"github.com/pcapsync/pcapsync/internal/compress"
	"log/slog"
	"os"
	"time"

	"github.com/pcapsync/pcapsync/internal/wire"
)

// Config configures an agent. The zero value of each field but
// Collector, and one of Interfaces or ReadFile, means its default.
type Config struct {
	Collector  string   // host:port of the collector; required
	Name       string   // agent name; "" means the host name
	Interfaces []string // capture live from these
	ReadFile   string   // or replay this pcap/pcapng file

	Filter    string // tcpdump syntax
	SnapLen   int    // 0 means 262144
	NoPromisc bool   // zero value: promiscuous, like tcpdump
	// RingSize is the bytes of each interface's capture ring, all of
	// them resident; 0 sizes it by RingTime (capture.Config.RingTime).
	RingSize int
	// RingTime sizes each ring to hold a stall of the agent this long
	// at capture.DesignPacketRate frames of capture.DesignFrameSize
	// bytes. 0 means capture.DefaultRingTime; it excludes RingSize.
	RingTime time.Duration
	// BlockSize is the capture ring's block size; a packet longer than
	// BlockSize-capture.BlockOverhead is cut (the snaplen in effect).
	// 0 means capture.DefaultBlockSize.
	BlockSize int

	// MaxRate limits live capture to this many packets per second,
	// shared evenly by the interfaces; packets over it are dropped and
	// counted. Over UDP it also paces a file replay (which then waits
	// instead of dropping), since nothing else slows a replay down there.
	// 0 means no limit.
	MaxRate int

	// Compress compresses every batch's records (see compress.Spec); the
	// zero value sends them as they are.
	Compress compress.Spec
	// Checksum says which batches carry a CRC-32C (wire.FlagUnchecked);
	// the zero value is ChecksumAuto.
	Checksum Checksum
	// Transport is TransportTCP ("" means it) or TransportUDP: batches
	// in datagrams that fit MTU, no acknowledgement, no resend (see
	// udp.go). UDP needs Insecure and excludes TLS and Spool.
	Transport string
	// MTU is the path MTU UDP datagrams must fit (IPv4: MTU - 28 bytes of
	// batch frame, IPv6: MTU - 48). 0 means 1500; UDP only.
	MTU int

	// BatchBytes seals a batch before it would exceed this size.
	// 0 means 1 MiB. Over UDP the MTU sets it instead.
	BatchBytes int
	// FlushInterval seals a non-empty live batch this long after its
	// first packet. 0 means 50ms.
	FlushInterval time.Duration
	// QueueBytes bounds the unacknowledged batches kept in memory.
	// 0 means 64 MiB.
	QueueBytes int64
	// Spool, if set, is a directory where every sealed batch is also
	// written until acknowledged: QueueBytes then bounds only the copies
	// kept in memory, SpoolBytes bounds the queue, and a restarted agent
	// (live capture) resends what its previous run left unacknowledged.
	Spool string
	// SpoolBytes bounds the spool. 0 means 1 GiB.
	SpoolBytes int64
	// StatsInterval is how often loss counters go to the collector.
	// 0 means 10s.
	StatsInterval time.Duration
	// ShutdownTimeout bounds the wait for the last acknowledgements
	// after a stop signal. 0 means 10s.
	ShutdownTimeout time.Duration
	// DialTimeout bounds connect plus handshake. 0 means 5s.
	DialTimeout time.Duration
	// BackoffMin and BackoffMax bound the reconnect delay, which doubles
	// per failure with ±25% jitter. A connection that ends before the
	// collector acknowledged anything new is a failure too; the delay
	// starts again from BackoffMin only after one that did. 0 means
	// 100ms and 5s.
	BackoffMin, BackoffMax time.Duration

	// TLS, if set, secures the connection (see pki.ClientConfig): the
	// collector's certificate is verified, against TLS.ServerName or, if
	// that is empty, the host part of Collector. TLS 1.2 at least.
	TLS *tls.Config
	// Token is the collector's shared secret, sent in the Hello, at most
	// wire.MaxTokenLen bytes; "" for none.
	Token string
	// Insecure allows plain TCP (TLS nil), also with a Token. Without TLS
	// or Insecure the Config is invalid.
	Insecure bool
	// Heartbeat: a ping goes to the collector when nothing was sent for
	// this long. 0 means 2s.
	Heartbeat time.Duration
	// PeerTimeout: a connection on which the collector sent nothing (not
	// even its heartbeat) for this long is dropped and made anew; it is
	// also the socket's TCP_USER_TIMEOUT on Linux. 0 means 6s.
	PeerTimeout time.Duration

	// AckLatency, if set, observes for every acknowledged batch the
	// seconds from its first write to a connection to its
	// acknowledgement (TCP only; a resend does not restart the clock).
	// Observe is called with the queue's lock held: it must be quick
	// and must not call back into the agent. A prometheus.Histogram fits.
	AckLatency Observer

	Logger *slog.Logger // nil means slog.Default()
}

// Observer takes one observation, such as a latency in seconds.
type Observer interface{ Observe(float64) }

func (c *Config) withDefaults() (Config, error) {
	d := *c
	if d.Name == "" {
		h, err := os.Hostname()
		if err != nil {
			return d, fmt.Errorf("agent: no --name given and the host name is unknown: %w", err)
		}
		d.Name = h
	}
	def := func(v *time.Duration, x time.Duration) {
		if *v == 0 {
			*v = x
		}
	}
	if d.SnapLen == 0 {
		d.SnapLen = 262144
	}
	if d.BatchBytes == 0 {
		d.BatchBytes = 1 << 20
	}
	if d.QueueBytes == 0 {
		d.QueueBytes = 64 << 20
	}
	if d.SpoolBytes == 0 {
		d.SpoolBytes = 1 << 30
	}
	def(&d.FlushInterval, 50*time.Millisecond)
	def(&d.StatsInterval, 10*time.Second)
	def(&d.ShutdownTimeout, 10*time.Second)
	def(&d.DialTimeout, 5*time.Second)
	def(&d.BackoffMin, 100*time.Millisecond)
	def(&d.BackoffMax, 5*time.Second)
	def(&d.Heartbeat, DefaultHeartbeat)
	def(&d.PeerTimeout, DefaultPeerTimeout)
	if d.Transport == "" {
		d.Transport = TransportTCP
	}
	if d.Transport == TransportUDP && d.MTU == 0 {
		d.MTU = DefaultMTU
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	return d, d.Validate()
}

// Transports.
const (
	TransportTCP = "tcp"
	TransportUDP = "udp"
)

// DefaultMTU is the path MTU UDP datagrams fit by default (Ethernet).
const DefaultMTU = 1500

// Heartbeat and peer timeout defaults, the same on agent and collector.
const (
	DefaultHeartbeat   = 2 * time.Second
	DefaultPeerTimeout = 6 * time.Second
)

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

// Validate reports the first unusable setting, naming the flag's field.
func (c *Config) Validate() error {
	switch {
	case c.Collector == "":
		return errors.New("agent: collector address is required")
	case len(c.Interfaces) == 0 && c.ReadFile == "":
		return errors.New("agent: give interfaces to capture from or a file to read")
	case len(c.Interfaces) > 0 && c.ReadFile != "":
		return errors.New("agent: interfaces and a file to read are mutually exclusive")
	case len(c.Interfaces) > wire.MaxInterfaces:
		return fmt.Errorf("agent: %d interfaces, at most %d", len(c.Interfaces), wire.MaxInterfaces)
	case c.SnapLen < 0 || c.SnapLen > 262144:
		return fmt.Errorf("agent: snaplen %d out of range 1..262144", c.SnapLen)
	case c.BatchBytes != 0 && (c.BatchBytes < 4096 || c.BatchBytes > 8<<20):
		return fmt.Errorf("agent: batch size %d out of range 4KiB..8MiB", c.BatchBytes)
	case c.QueueBytes != 0 && c.QueueBytes < int64(max(c.BatchBytes, 1<<20)):
		return fmt.Errorf("agent: queue size %d smaller than one batch (%d)", c.QueueBytes, max(c.BatchBytes, 1<<20))
	case c.RingSize < 0 || c.RingTime < 0 || c.BlockSize < 0:
		return errors.New("agent: ring size, ring time and block size must not be negative")
	case c.RingSize != 0 && c.RingTime != 0:
		return errors.New("agent: a ring size and a ring time exclude each other")
	case c.MaxRate < 0:
		return fmt.Errorf("agent: max rate %d packets/s is negative", c.MaxRate)
	case c.SpoolBytes < 0 || c.SpoolBytes > 0 && c.SpoolBytes < int64(max(c.BatchBytes, 1<<20)):
		return fmt.Errorf("agent: spool size %d smaller than one batch", c.SpoolBytes)
	case c.FlushInterval < 0 || c.StatsInterval < 0 || c.ShutdownTimeout < 0 || c.DialTimeout < 0 || c.BackoffMin < 0 || c.BackoffMax < 0:
		return errors.New("agent: durations must not be negative")
	case c.Heartbeat < 0 || c.PeerTimeout < 0:
		return errors.New("agent: durations must not be negative")
	case c.Transport != "" && c.Transport != TransportTCP && c.Transport != TransportUDP:
		return fmt.Errorf("agent: transport %q: want %s or %s", c.Transport, TransportTCP, TransportUDP)
	case c.Transport != TransportUDP && c.MTU != 0:
		return errors.New("agent: an MTU applies to the UDP transport only")
	case c.MTU != 0 && (c.MTU < 576 || c.MTU > 65535):
		return fmt.Errorf("agent: MTU %d out of range 576..65535", c.MTU)
	case c.Transport == TransportUDP && (c.TLS != nil || !c.Insecure):
		return errors.New("agent: UDP is plaintext (no DTLS): set Insecure (--insecure), and no TLS; TLS needs the TCP transport")
	case c.Checksum > ChecksumNever:
		return fmt.Errorf("agent: %s is not one of auto, always, never", c.Checksum)
	case c.Transport == TransportUDP && c.Checksum == ChecksumNever:
		return errors.New("agent: UDP batches always carry a checksum (datagrams have no TLS): --checksum never needs the TCP transport")
	case c.Transport == TransportUDP && c.Spool != "":
		return errors.New("agent: a spool keeps batches until acknowledged, and UDP acknowledges nothing: use the TCP transport")
	case c.TLS == nil && !c.Insecure:
		return errors.New("agent: no TLS configured: set TLS, or Insecure for plain TCP")
	case !c.Compress.Codec.Known() || c.Compress.Level < 0 || c.Compress.Level > 22 ||
		c.Compress.Level != 0 && c.Compress.Codec != wire.CodecZstd || c.Compress.Auto && c.Compress.Codec != wire.CodecS2:
		return fmt.Errorf("agent: compression %+v is not one of none, lz4, s2, zstd[:1..22], auto", c.Compress)
	case len(c.Token) > wire.MaxTokenLen:
		return fmt.Errorf("agent: token of %d bytes, at most %d", len(c.Token), wire.MaxTokenLen)
	}
	if hb, pt := cmp.Or(c.Heartbeat, DefaultHeartbeat), cmp.Or(c.PeerTimeout, DefaultPeerTimeout); hb >= pt {
		return fmt.Errorf("agent: heartbeat %s must be shorter than the peer timeout %s", hb, pt)
	}
	if c.Name != "" {
		if err := wire.ValidateName(c.Name); err != nil {
			return fmt.Errorf("agent: %w (set --name)", err)
		}
	}
	seen := map[string]bool{}
	for _, ifc := range c.Interfaces {
		if ifc == "" || len(ifc) > 255 || seen[ifc] {
			return fmt.Errorf("agent: interface %q is empty, too long or repeated", ifc)
		}
		seen[ifc] = true
	}
	return nil
}
