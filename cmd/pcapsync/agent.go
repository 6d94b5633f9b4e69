package main

import (
	"context"
	"flag"
	"fmt"
	"github.com/pcapsync/pcapsync/internal/compress"
	"io"
	"net"
	"strings"
	"time"

	"github.com/pcapsync/pcapsync/internal/agent"
	"github.com/pcapsync/pcapsync/internal/capture"
	"github.com/pcapsync/pcapsync/internal/metrics"
	"github.com/pcapsync/pcapsync/internal/pki"
)

func runAgent(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("agent", `pcapsync agent --collector HOST[:PORT] (--iface IF[,IF...] | --read FILE) (TLS flags | --insecure) [flags] [FILTER]

Captures packets and streams them to a collector. FILTER (the --filter
flag, or the words after the flags) is tcpdump syntax, applied in the
kernel. The agent always excludes its own connection to the collector
from capture by adding "and not (tcp and host COLLECTOR-IP and port
COLLECTOR-PORT)" to the filter, so it never captures what it sends; this
also hides other traffic to that exact address and port. With
--transport udp it is udp, and IP fragments to and from COLLECTOR-IP are
hidden too (fragments after the first carry no port).

On SIGINT/SIGTERM it stops capturing, sends what it holds and waits up to
--shutdown-timeout for acknowledgements, then prints a summary and exits 0.
With --read it exits once the collector acknowledged every packet.

The connection is TLS (1.2 or newer) when any --tls flag or --token-file
is given: the collector's certificate is verified against --tls-ca (the
system's roots by default) and the name in --collector (or
--tls-server-name); --tls-cert and --tls-key are the agent's client
certificate, whose CN or a DNS name must be the agent's name. Plain TCP
needs --insecure.

--transport udp sends batches in datagrams that fit --mtu (a batch
holding a packet too big for one goes in pieces, never IP-fragmented),
for links where the lowest latency matters more than delivery: nothing is
acknowledged or resent, and the collector counts what the network lost.
UDP is plaintext (no DTLS): it needs --insecure.`, stderr)
	var cfg agent.Config
	coll := fs.String("collector", "", "collector address, HOST or HOST:PORT (port "+DefaultPort+" by default) (required)")
	fs.StringVar(&cfg.Name, "name", "", "agent name: the collector's directory for this agent (default: the host name)")
	ifaces := fs.String("iface", "", "capture from these interfaces, comma-separated")
	fs.StringVar(&cfg.ReadFile, "read", "", "replay this pcap or pcapng file instead of capturing")
	fs.StringVar(&cfg.Filter, "filter", "", "capture filter, tcpdump syntax")
	fs.IntVar(&cfg.SnapLen, "snaplen", 262144, "bytes captured per packet at most")
	fs.BoolVar(&cfg.NoPromisc, "no-promisc", false, "do not put interfaces into promiscuous mode")
	fs.IntVar(&cfg.MaxRate, "max-rate", 0, "packets per second at most (shared evenly by the interfaces, bursts of 0.1 s pass); packets over it are dropped and counted; 0 is no limit")
	var ring int64
	fs.Var(sizeFlag{&ring}, "ring-size", "kernel ring buffer per interface, all of it resident (default: sized by --ring-time)")
	fs.DurationVar(&cfg.RingTime, "ring-time", capture.DefaultRingTime, fmt.Sprintf("size each kernel ring to hold a stall of the agent this long at %d packets/s of %d-byte frames (a block for every block timeout, flush-interval/16, and room for the bytes; at most %d MiB)",
		capture.DesignPacketRate, capture.DesignFrameSize, capture.MaxTimedRing>>20))
	block := int64(capture.DefaultBlockSize)
	fs.Var(sizeFlag{&block}, "block-size", fmt.Sprintf("kernel ring block size (a power of two of pages); a packet longer than it holds (block size - %d bytes) is cut, its original length kept", capture.BlockOverhead))
	batch := int64(1 << 20)
	fs.Var(sizeFlag{&batch}, "batch-size", "largest batch sent in one frame (bigger: fewer writes, more latency under load)")
	fs.Func("compress", "compress each batch: none, lz4, s2, zstd[:LEVEL 1-22], or auto (s2 only where it saves 1/8 or more; incompressible traffic goes raw) (default none)", func(s string) error {
		sp, err := compress.ParseSpec(s)
		cfg.Compress = sp
		return err
	})
	fs.Func("checksum", "CRC-32C on each batch: auto (only where nothing else protects it: not inside TLS, whose AEAD authenticates every byte, unless --spool keeps batches on disk), always (e.g. for a collector behind a TLS-terminating proxy), or never (TCP only) (default auto)", func(s string) error {
		c, err := agent.ParseChecksum(s)
		cfg.Checksum = c
		return err
	})
	fs.DurationVar(&cfg.FlushInterval, "flush-interval", 50*time.Millisecond, "send a batch at the latest this long after its first packet (live capture)")
	queue := int64(64 << 20)
	fs.Var(sizeFlag{&queue}, "queue-size", "memory for unacknowledged batches; when full, live capture drops and counts (with --spool: memory kept as a cache of the spool)")
	fs.StringVar(&cfg.Spool, "spool", "", "directory where every batch is also written until acknowledged: a collector outage of minutes loses nothing, and a restarted live agent resends what its previous run left")
	spoolSize := int64(1 << 30)
	fs.Var(sizeFlag{&spoolSize}, "spool-size", "largest spool; when full, live capture drops and counts")
	fs.DurationVar(&cfg.StatsInterval, "stats-interval", 10*time.Second, "how often drop counters are sent to the collector")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", 10*time.Second, "on SIGINT/SIGTERM, how long to wait for the last acknowledgements")
	tlsOn := fs.Bool("tls", false, "use TLS, verifying the collector with the system's roots (implied by every other --tls flag and by --token-file)")
	tlsCA := fs.String("tls-ca", "", "verify the collector's certificate against these CAs (PEM) instead of the system's roots")
	tlsCert := fs.String("tls-cert", "", "the agent's client certificate (PEM); its CN or a DNS name must be the agent's name")
	tlsKey := fs.String("tls-key", "", "the key of --tls-cert (PEM)")
	serverName := fs.String("tls-server-name", "", "the name the collector's certificate must carry (default: the host in --collector)")
	tokenFile := fs.String("token-file", "", "send this shared token (surrounding white space is ignored) to the collector; only over TLS unless --insecure")
	fs.BoolVar(&cfg.Insecure, "insecure", false, "plain TCP (or UDP), without TLS: packets cross the network in clear text, the collector is not verified")
	fs.StringVar(&cfg.Transport, "transport", agent.TransportTCP, "tcp (acknowledged, resent after a loss) or udp (lowest latency: datagrams that fit --mtu, nothing resent, losses counted by the collector; needs --insecure)")
	fs.IntVar(&cfg.MTU, "mtu", agent.DefaultMTU, "with --transport udp: the path MTU datagrams fit (payload: MTU - 28 bytes over IPv4, - 48 over IPv6); a batch too big for one datagram (a packet that does not fit alone) is sent in pieces, each a datagram within the MTU")
	fs.DurationVar(&cfg.Heartbeat, "heartbeat", agent.DefaultHeartbeat, "send a ping when nothing was sent for this long, so the collector knows the agent is alive")
	fs.DurationVar(&cfg.PeerTimeout, "peer-timeout", agent.DefaultPeerTimeout, "reconnect when the collector sent nothing (not even its heartbeat) for this long; also TCP_USER_TIMEOUT")
	var mf metricsFlags
	mf.register(fs)
	level := fs.String("log-level", "info", "debug, info, warn or error")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		if cfg.Filter != "" {
			return fmt.Errorf("%w: give the filter either with --filter or as arguments, not both", errUsage)
		}
		cfg.Filter = strings.Join(fs.Args(), " ")
	}
	log, err := newLogger(stderr, *level)
	if err != nil {
		return err
	}
	cfg.Logger = log
	useTLS := *tlsOn || *tlsCA != "" || *tlsCert != "" || *tlsKey != "" || *serverName != ""
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch cfg.Transport {
	case agent.TransportTCP:
		if set["mtu"] {
			return fmt.Errorf("%w: --mtu applies to --transport udp only", errUsage)
		}
		cfg.MTU = 0
	case agent.TransportUDP:
		switch {
		case useTLS || !cfg.Insecure:
			return fmt.Errorf("%w: --transport udp is plaintext (no DTLS): add --insecure (and drop the --tls flags; TLS needs --transport tcp)", errUsage)
		case set["batch-size"]:
			return fmt.Errorf("%w: --batch-size does not apply to --transport udp: a batch is one datagram, sized by --mtu", errUsage)
		case cfg.MTU < 576 || cfg.MTU > 65535:
			return fmt.Errorf("%w: --mtu %d out of range 576..65535", errUsage, cfg.MTU)
		case set["spool"]:
			return fmt.Errorf("%w: --spool needs --transport tcp: a spool keeps batches until acknowledged, and UDP acknowledges nothing", errUsage)
		}
	default:
		return fmt.Errorf("%w: --transport %q: want tcp or udp", errUsage, cfg.Transport)
	}
	switch {
	case useTLS && cfg.Insecure:
		return fmt.Errorf("%w: --insecure and the --tls flags exclude each other", errUsage)
	case !useTLS && !cfg.Insecure && *tokenFile == "":
		return fmt.Errorf("%w: no transport security chosen: give --tls-ca FILE (the CA of the collector's certificate; --tls alone trusts the system's roots) with --tls-cert FILE --tls-key FILE or --token-file FILE as the collector requires, or --insecure for plain TCP", errUsage)
	case useTLS || !cfg.Insecure:
		if cfg.TLS, err = pki.ClientConfig(*tlsCA, *tlsCert, *tlsKey, *serverName); err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		if *tlsCert != "" {
			logCertificate(log, cfg.TLS, *tlsCert)
		}
	}
	if *tokenFile != "" {
		if cfg.Token, err = readToken(*tokenFile, log); err != nil {
			return err
		}
	}
	cfg.Collector = *coll
	if cfg.Collector != "" {
		if _, _, err := net.SplitHostPort(cfg.Collector); err != nil {
			cfg.Collector = net.JoinHostPort(strings.Trim(cfg.Collector, "[]"), DefaultPort)
		}
	}
	if *ifaces != "" {
		cfg.Interfaces = strings.Split(*ifaces, ",")
	}
	if ring > 1<<40 || batch > 1<<30 || block > capture.MaxBlockSize {
		return fmt.Errorf("%w: --ring-size, --block-size or --batch-size too large", errUsage)
	}
	if set["ring-size"] {
		if set["ring-time"] {
			return fmt.Errorf("%w: --ring-size and --ring-time exclude each other", errUsage)
		}
		cfg.RingTime = 0
	}
	cfg.BlockSize = int(block)
	cfg.RingSize, cfg.BatchBytes, cfg.QueueBytes, cfg.SpoolBytes = int(ring), int(batch), queue, spoolSize
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if err := mf.check(); err != nil {
		return err
	}
	mln, err := mf.listen()
	if err != nil {
		return err
	}
	var m *metrics.Agent
	if mln != nil {
		m = metrics.NewAgent()
		cfg.AckLatency = m.AckLatency
	}
	a, err := agent.New(cfg)
	if err != nil {
		if mln != nil {
			mln.Close()
		}
		return err
	}
	stopMetrics := func() {}
	if m != nil {
		m.Watch(a)
		stopMetrics = mf.serve(mln, metrics.Handler(m.Registry, metrics.Options{Pprof: mf.pprof}), log)
	}
	sum, err := a.Run(ctx)
	stopMetrics()
	fmt.Fprintln(stdout, "pcapsync agent:", sum)
	return err
}
