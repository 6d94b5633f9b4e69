package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pcapsync/pcapsync/internal/agent"
	"github.com/pcapsync/pcapsync/internal/agentproc"
	"github.com/pcapsync/pcapsync/internal/capture"
	"github.com/pcapsync/pcapsync/internal/kafkaconn"
	"github.com/pcapsync/pcapsync/internal/liveness"
	"github.com/pcapsync/pcapsync/internal/metrics"
	"github.com/pcapsync/pcapsync/internal/pki"
	"github.com/pcapsync/pcapsync/internal/wire"
)

const agentUsage = `pcapsync agent --collector HOST[:PORT][,HOST[:PORT]...] (-i IF[,IF...] | -r FILE) (TLS flags | --insecure) [flags] [FILTER]
pcapsync agent --kafka BROKERS [--kafka-topic TOPIC] (-i IF[,IF...] | -r FILE) [--kafka-tls flags] [--kafka-sasl flags] [flags] [FILTER]

tcpdump's short flags mean what they mean there: -i interfaces, -r file
to read, -s snaplen, -p no promiscuous mode, -B ring buffer in KiB, -v
more verbose (debug log).

Captures packets and streams them to a collector. FILTER (the --filter
flag, or the words after the flags) is tcpdump syntax, applied in the
kernel. The agent always excludes its own connection to the collector
from capture by adding "and not (tcp and host COLLECTOR-IP and port
COLLECTOR-PORT)" to the filter, so it never captures what it sends; this
also hides other traffic to that exact address and port. With
--transport udp it is udp, and IP fragments to and from COLLECTOR-IP are
hidden too (fragments after the first carry no port). With several
collectors the clause covers each of them.

--collector A,B,C lists collectors to fail over between: the agent
stays with the one it is connected to and moves on to the next (after
the last: the first) when it cannot connect or the connection is lost,
at once, waiting out the backoff after each round of the list; it
resends what is unacknowledged to the next, whose files may then hold
some batches the previous one also wrote (docs/reliability.md). A
refusal (a reject, a TLS failure of the first connection) stops the
agent as with one collector. Over UDP it moves on when the collector's
host reports its port closed or unreachable.

On SIGINT/SIGTERM it stops capturing, sends what it holds and waits up to
--shutdown-timeout for acknowledgements, then prints a summary and exits 0.
With --read it exits once the collector acknowledged every packet.

The connection is TLS (1.2 or newer) when any --tls flag or --token-file
is given: the collector's certificate is verified against --tls-ca (the
system's roots by default) and the name in --collector (or
--tls-server-name); --tls-cert and --tls-key are the agent's client
certificate, whose CN or a DNS name must be the agent's name; without
--name the agent takes its CN (or else its first DNS name that is a
valid name) and logs it. Plain TCP needs --insecure.

--transport udp sends batches in datagrams that fit --mtu (a batch
holding a packet too big for one goes in pieces, never IP-fragmented),
for links where the lowest latency matters more than delivery: nothing is
acknowledged or resent, and the collector counts what the network lost.
UDP is plaintext (no DTLS): it needs --insecure.

--kafka BROKERS produces every batch straight to a Kafka topic, with no
collector: the same records an ingest collector (pcapsync collector
--kafka) produces, which pcapsync writer writes into files. Kafka's
acknowledgement (all in-sync replicas) releases a batch from the queue
and the spool. The topic is created when absent; batches are made small
enough to fit its max.message.bytes. No token is checked (there is no
collector): the brokers' TLS (--kafka-tls-*) and SASL (--kafka-sasl)
authenticate the agent. The capture filter excludes the brokers'
addresses instead of a collector's (docs/scale-out.md).`

func agentCommand(s streams) *cobra.Command {
	c := leaf("agent --collector HOST[:PORT] (-i IF[,IF...] | -r FILE) (--tls-ca FILE [--tls-cert FILE --tls-key FILE] | --insecure) [flags] [FILTER]", "capture packets (or replay a file) and stream them to a collector", agentUsage, cobra.ArbitraryArgs, func(fs *pflag.FlagSet) runFunc {
		var cfg agentproc.Config
		flags := agentFlags(fs, &cfg.Agent)
		fs.StringVar(&cfg.Metrics.Addr, "metrics", "", metricsUsage(metrics.DefaultAgentPort, "/metrics"))
		fs.BoolVar(&cfg.Metrics.Pprof, "pprof", false, "with --metrics, also serve Go's profiler at /debug/pprof/ (no authentication)")
		var lf logFlags
		lf.register(fs, true)
		summary := addSummaryFlag(fs)
		return func(ctx context.Context, args []string) error {
			if len(args) > 0 {
				if fs.Changed("filter") {
					return usageError("give the filter either with --filter or as arguments, not both")
				}
				cfg.Agent.Filter = strings.Join(args, " ")
			}
			log, err := lf.logger(s.stderr)
			if err != nil {
				return err
			}
			cfg.Logger, cfg.Agent.Logger = log, log
			summary.follow(fs, &lf)
			if err := flags.apply(fs, &cfg.Agent, log); err != nil {
				return err
			}
			cfg.CertFiles, cfg.User = flags.certFiles(), *flags.user
			cfg.Agent.Version = agentVersion()
			return runAgent(ctx, cfg, func(sum agent.Summary) error {
				return summary.print(s.stdout, agentSummary{sum})
			})
		}
	})
	annotate(c.Flags(), "filter", annPositional)
	return c
}

// runAgent runs the agent process cfg describes (agentproc) until ctx
// ends (or its file is sent), and hands its summary to printSummary
// once it ran. A Config it refuses is a usage error.
func runAgent(ctx context.Context, cfg agentproc.Config, printSummary func(agent.Summary) error) error {
	p, err := agentproc.New(cfg)
	switch {
	case errors.Is(err, agent.ErrNoSecurity): // said with the flags that choose
		return usageError("agent: no transport security chosen: set TLS (--tls-ca FILE, the CA of the collector's certificate, or --tls alone for the system's roots; with --tls-cert FILE --tls-key FILE or --token-file FILE as the collector requires), or Insecure (--insecure) for plain TCP")
	case errors.Is(err, agentproc.ErrConfig):
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if err != nil {
		return err
	}
	sum, err := p.Run(ctx)
	return errors.Join(err, printSummary(sum))
}

// agentFlagVals are the agent's flags that are no agent.Config field
// as they are: files to read, and fields set only when given.
type agentFlagVals struct {
	collector, iface, user                    *string
	tls                                       *bool
	tlsCA, tlsCert, tlsKey, serverName, token *string
	// Given only: left unset, these fields stay zero, which means the
	// package's default for the other settings (the MTU for the
	// transport, the batch size over TCP, the ring time without a ring
	// size); the flag shows that same default.
	mtu       *int
	ringTime  *time.Duration
	batchSize int
	// bufferKiB is tcpdump's -B: the ring size in KiB.
	bufferKiB int
	// kafka becomes Config.Kafka when --kafka is given.
	kafka kafkaconn.Config
}

// agentFlags defines the agent's flags on fs, each default the agent
// package's, writing into cfg where a flag is a field as it is.
func agentFlags(fs *pflag.FlagSet, cfg *agent.Config) *agentFlagVals {
	f := &agentFlagVals{batchSize: agent.DefaultBatchBytes}
	f.user = fs.StringP("user", "Z", "", fmt.Sprintf(userFlagUsage, "spool, which it hands to the user"))
	f.collector = fs.String("collector", "", "collector address, HOST or HOST:PORT (port "+strconv.Itoa(wire.DefaultPort)+" by default), or several, comma-separated: the agent stays with the one it is connected to and fails over to the next when it is down (required)")
	fs.StringVar(&cfg.Name, "name", "", "agent name: the collector's directory for this agent (default: the CN of --tls-cert or --kafka-tls-cert, else the host name)")
	f.iface = fs.StringP("iface", "i", "", "capture from these interfaces, comma-separated")
	fs.StringVarP(&cfg.ReadFile, "read", "r", "", "replay this pcap or pcapng file instead of capturing")
	fs.StringVar(&cfg.Filter, "filter", "", "capture filter, tcpdump syntax")
	fs.IntVarP(&cfg.SnapLen, "snaplen", "s", agent.DefaultSnapLen, "bytes captured per packet at most")
	fs.BoolVarP(&cfg.NoPromisc, "no-promisc", "p", false, "do not put interfaces into promiscuous mode")
	fs.IntVar(&cfg.MaxRate, "max-rate", 0, "packets per second at most (shared evenly by the interfaces, bursts of 0.1 s pass); packets over it are dropped and counted; 0 is no limit")
	fs.Var(intSizeFlag{&cfg.RingSize}, "ring-size", "kernel ring buffer per interface, all of it resident (default: sized by --ring-time)")
	fs.IntVarP(&f.bufferKiB, "buffer-size", "B", 0, "--ring-size in KiB, as tcpdump's -B")
	f.ringTime = fs.Duration("ring-time", agent.DefaultRingTime, fmt.Sprintf("size each kernel ring to hold a stall of the agent this long at %d packets/s of %d-byte frames (a block for every block timeout, flush-interval/16, and room for the bytes; at most %d MiB)",
		capture.DesignPacketRate, capture.DesignFrameSize, capture.MaxTimedRing>>20))
	cfg.BlockSize = agent.DefaultBlockSize
	fs.Var(intSizeFlag{&cfg.BlockSize}, "block-size", fmt.Sprintf("kernel ring block size (a power of two of pages); a packet longer than it holds (block size - %d bytes) is cut, its original length kept", capture.BlockOverhead))
	fs.Var(intSizeFlag{&f.batchSize}, "batch-size", "largest batch sent in one frame (bigger: fewer writes, more latency under load)")
	fs.Var(compressFlag{&cfg.Compress}, "compress", "compress each batch: none, lz4, s2, zstd[:LEVEL 1-22], or auto (s2 only where it saves 1/8 or more; incompressible traffic goes raw)")
	cfg.Checksum = agent.DefaultChecksum
	fs.TextVar(&cfg.Checksum, "checksum", agent.DefaultChecksum, "CRC-32C on each batch: auto (only where nothing else protects it: not inside TLS, whose AEAD authenticates every byte, unless --spool keeps batches on disk), always (e.g. for a collector behind a TLS-terminating proxy), or never (TCP only)")
	fs.DurationVar(&cfg.FlushInterval, "flush-interval", agent.DefaultFlushInterval, "send a batch at the latest this long after its first packet (live capture)")
	cfg.QueueBytes = agent.DefaultQueueBytes
	fs.Var(sizeFlag{&cfg.QueueBytes}, "queue-size", "memory for unacknowledged batches; when full, live capture drops and counts (with --spool: memory kept as a cache of the spool); a --read replay over TCP without --spool waits instead, and reads at most 8M beyond what it has sent")
	fs.StringVar(&cfg.Spool, "spool", "", "directory where every batch is also written until acknowledged: a collector outage of minutes loses nothing, and a restarted live agent resends what its previous run left")
	cfg.SpoolBytes = agent.DefaultSpoolBytes
	fs.Var(sizeFlag{&cfg.SpoolBytes}, "spool-size", "largest spool; when full, live capture drops and counts")
	fs.DurationVar(&cfg.StatsInterval, "stats-interval", agent.DefaultStatsInterval, "how often drop counters are sent to the collector")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", agent.DefaultShutdownTimeout, "on SIGINT/SIGTERM, how long to wait for the last acknowledgements")
	f.tls = fs.Bool("tls", false, "use TLS, verifying the collector with the system's roots (implied by every other --tls flag and by --token-file)")
	f.tlsCA = fs.String("tls-ca", "", "verify the collector's certificate against these CAs (PEM) instead of the system's roots")
	f.tlsCert = fs.String("tls-cert", "", "the agent's client certificate (PEM); its CN or a DNS name must be the agent's name")
	f.tlsKey = fs.String("tls-key", "", "the key of --tls-cert (PEM)")
	f.serverName = fs.String("tls-server-name", "", "the name the collector's certificate must carry (default: the host in --collector)")
	f.token = fs.String("token-file", "", "send this shared token (surrounding white space is ignored) to the collector; only over TLS unless --insecure")
	fs.BoolVar(&cfg.Insecure, "insecure", false, "plain TCP (or UDP), without TLS: packets cross the network in clear text, the collector is not verified")
	fs.StringVar(&cfg.Transport, "transport", agent.DefaultTransport, "tcp (acknowledged, resent after a loss) or udp (lowest latency: datagrams that fit --mtu, nothing resent, losses counted by the collector; needs --insecure)")
	f.mtu = fs.Int("mtu", agent.DefaultMTU, "with --transport udp: the path MTU datagrams fit (payload: MTU - 28 bytes over IPv4, - 48 over IPv6); a batch too big for one datagram (a packet that does not fit alone) is sent in pieces, each a datagram within the MTU")
	fs.DurationVar(&cfg.Heartbeat, "heartbeat", liveness.DefaultHeartbeat, "send a ping when nothing was sent for this long, so the collector knows the agent is alive")
	fs.DurationVar(&cfg.PeerTimeout, "peer-timeout", liveness.DefaultPeerTimeout, "reconnect when the collector sent nothing (not even its heartbeat) for this long; also TCP_USER_TIMEOUT")
	kafkaFlagsOn(fs, &f.kafka, "produce every batch straight to these Kafka brokers, no collector (excludes --collector, --transport udp, --token-file and the collector's --tls flags)")
	return f
}

// collectorOnly are the agent's flags that concern a connection to a
// collector, which --kafka has none of (Config.Validate refuses the
// ones that are Config fields of their own).
var collectorOnly = []string{"heartbeat", "peer-timeout"}

// apply sets the Config fields the flags in f stand for, once fs is
// parsed: the given-only fields, the collectors, the interfaces, and TLS (chosen by any
// --tls flag, or by --token-file without --insecure) and the token,
// read from their files. Rules are agent.Config.Validate's.
func (f *agentFlagVals) apply(fs *pflag.FlagSet, cfg *agent.Config, log *slog.Logger) error {
	if fs.Changed("buffer-size") {
		if fs.Changed("ring-size") {
			return usageError("--buffer-size (-B) and --ring-size set the same ring: give one")
		}
		if f.bufferKiB < 0 || f.bufferKiB > 1<<30 {
			return usageError("--buffer-size %d: want KiB between 0 and %d", f.bufferKiB, 1<<30)
		}
		cfg.RingSize = f.bufferKiB << 10
	}
	fs.Visit(func(fl *pflag.Flag) {
		switch fl.Name {
		case "mtu":
			cfg.MTU = *f.mtu
		case "ring-time":
			cfg.RingTime = *f.ringTime
		case "batch-size":
			cfg.BatchBytes = f.batchSize
		}
	})
	if *f.collector != "" {
		cfg.Collectors = strings.Split(*f.collector, ",")
	}
	if err := f.applyKafka(fs, cfg); err != nil {
		return err
	}
	if *f.iface != "" {
		cfg.Interfaces = strings.Split(*f.iface, ",")
	}
	useTLS := *f.tls || *f.tlsCA != "" || *f.tlsCert != "" || *f.tlsKey != "" || *f.serverName != ""
	if useTLS || *f.token != "" && !cfg.Insecure {
		tc, err := pki.ClientConfig(*f.tlsCA, *f.tlsCert, *f.tlsKey, *f.serverName)
		if err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		if *f.tlsCert != "" {
			logCertificate(log, tc, *f.tlsCert)
		}
		cfg.TLS = tc
	}
	if *f.token != "" {
		tok, err := readToken(*f.token, log)
		if err != nil {
			return err
		}
		cfg.Token = tok
	}
	return nil
}

// certFiles are the certificate files the agent was given, for the
// metrics of their expiry.
func (f *agentFlagVals) certFiles() [][2]string {
	return [][2]string{{pki.RoleCert, *f.tlsCert}, {pki.RoleCA, *f.tlsCA},
		{pki.RoleCert, f.kafka.CertFile}, {pki.RoleCA, f.kafka.CAFile}}
}

// applyKafka sets Config.Kafka when --kafka is given, and refuses the
// other --kafka flags without it and the collector's flags with it.
func (f *agentFlagVals) applyKafka(fs *pflag.FlagSet, cfg *agent.Config) error {
	var err error
	if len(f.kafka.Brokers) == 0 {
		fs.Visit(func(fl *pflag.Flag) {
			if err == nil && strings.HasPrefix(fl.Name, "kafka-") {
				err = usageError("--%s needs --kafka BROKERS", fl.Name)
			}
		})
		return err
	}
	for _, name := range collectorOnly {
		if fs.Changed(name) {
			return usageError("--%s concerns the connection to a collector; with --kafka there is none", name)
		}
	}
	cfg.Kafka = &f.kafka
	return nil
}
