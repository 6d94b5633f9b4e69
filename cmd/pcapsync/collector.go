package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pcapsync/pcapsync/internal/collector"
	"github.com/pcapsync/pcapsync/internal/liveness"
	"github.com/pcapsync/pcapsync/internal/metrics"
	"github.com/pcapsync/pcapsync/internal/queryhttp"
	"github.com/pcapsync/pcapsync/internal/redisfeed"
	"github.com/pcapsync/pcapsync/internal/serve"
	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/tap"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// DefaultPort is wire.DefaultPort, for the flags' help texts.
var DefaultPort = strconv.Itoa(wire.DefaultPort)

const collectorUsage = `Accepts agents and writes what they capture into pcapng files. Agents
connect over TLS (1.2 or newer): --tls-client-ca requires and verifies a
client certificate from every agent, whose name must then be the
certificate's CN or one of its DNS names; --token-file requires a shared
token in every hello. Plain TCP needs --insecure.

--listen-udp also accepts agents running --transport udp (beside TCP, on
the same or another port): plaintext, no DTLS, so it needs --insecure
(with --tls-cert TCP keeps TLS, and --insecure admits only UDP);
--token-file still applies.

--tap HOST:PORT[=AGENT[:IFACE]] streams what is written, live, as pcapng:
wireshark -k -i TCP@HOST:PORT sees the port's default selection, and
pcapsync tail --tap HOST:PORT asks for any agent, interface and
filter. Plain TCP on a loopback address, TLS like the agents' port
elsewhere; --token-file applies (docs/tap.md).

--query-listen HOST:PORT serves pcapsync query over HTTPS to pcapsync
query --from HOST:PORT and curl, with the same certificate and token
rules (docs/query.md).`

func collectorCommand(s streams) *cobra.Command {
	return leaf("collector --dir DIR [--listen HOST:PORT] (--tls-cert FILE --tls-key FILE [--tls-client-ca FILE] | --insecure) [--token-file FILE] [flags]",
		"accept agents and write what they capture into pcapng files", collectorUsage, noArgs, serveFlags(s, collectorFlags, collectorRole))
}

// collectorRole sets the role of a collector: an ingest collector with
// --kafka.
func collectorRole(cfg *serve.Config) error {
	cfg.Role = serve.RoleCollector
	if len(cfg.Kafka.Brokers) > 0 {
		cfg.Role = serve.RoleIngest
	}
	return nil
}

// serveFlags returns the flags-and-run of a command that runs a
// serve.Service (the collector, the writer): flags defines its own
// flags, check refuses what they cannot express and sets the role.
func serveFlags(s streams, flags func(*pflag.FlagSet, *serve.Config) givenOnly, check func(*serve.Config) error) func(*pflag.FlagSet) runFunc {
	return func(fs *pflag.FlagSet) runFunc {
		var cfg serve.Config
		given := flags(fs, &cfg)
		user := fs.StringP("user", "Z", "", fmt.Sprintf(userFlagUsage, "the TLS and token files; a missing --dir is made for the user"))
		var lf logFlags
		lf.register(fs, true)
		summary := addSummaryFlag(fs)
		return func(ctx context.Context, _ []string) error {
			given.apply(fs)
			if err := check(&cfg); err != nil {
				return err
			}
			log, err := lf.logger(s.stderr)
			if err != nil {
				return err
			}
			cfg.Logger = log
			summary.follow(fs, &lf)
			if *user != "" {
				cfg.BeforeStore = func() error { return switchUser(log, *user, cfg.Collector.Store.Dir) }
			}
			return runCollector(ctx, cfg, func(sum serve.Summary) error {
				return summary.print(s.stdout, collectorSummary{sum})
			})
		}
	}
}

// runCollector runs the collector cfg describes until ctx ends, and
// hands its summary to printSummary once it ran.
func runCollector(ctx context.Context, cfg serve.Config, printSummary func(serve.Summary) error) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	svc, err := serve.New(cfg)
	if errors.Is(err, serve.ErrConfig) {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if err != nil {
		return err
	}
	err = svc.Run(ctx)
	return errors.Join(err, printSummary(svc.Summary()))
}

// collectorFlags defines the collector's flags on fs, each default the
// package's, writing into cfg. The fields of the flags it returns are
// set only when their flag is given (apply): left zero, a tap or Redis
// setting is one the user did not ask for, and means the default.
func collectorFlags(fs *pflag.FlagSet, cfg *serve.Config) givenOnly {
	cc, st := &cfg.Collector, &cfg.Collector.Store
	fs.StringVar(&cfg.Listen, "listen", serve.DefaultListen, "address to accept agents on: 0.0.0.0:"+DefaultPort+" every IPv4 address (IPv4 only), [::]:"+DefaultPort+" every IPv6 address (IPv6 only), :"+DefaultPort+" both")
	fs.StringVar(&cfg.ListenUDP, "listen-udp", "", "also accept agents over UDP (--transport udp) on this HOST:PORT, e.g. 0.0.0.0:"+DefaultPort+"; plaintext: needs --insecure")
	storeFlagsOn(fs, st)
	fs.Var(uint32SizeFlag{&cc.MaxFrame, collector.DefaultMaxFrame}, "max-frame", "largest frame accepted from an agent")
	cc.UDPReassemblyBytes = collector.DefaultUDPReassemblyBytes
	fs.Var(sizeFlag{&cc.UDPReassemblyBytes}, "udp-reassembly-mem", "with --listen-udp: memory for batches arriving in pieces (a packet larger than a datagram), all agents together; over it the oldest incomplete one is dropped and counted")
	cc.ReadMemory = collector.DefaultReadMemory
	fs.Var(sizeFlag{&cc.ReadMemory}, "read-memory", "memory for frames being received over TCP, all connections together (at least --max-frame); over it, connections stop reading until memory is free")
	fs.DurationVar(&cc.HandshakeTimeout, "handshake-timeout", collector.DefaultHandshakeTimeout, "time a new connection has to complete its handshake")
	fs.DurationVar(&cc.ShutdownTimeout, "shutdown-timeout", collector.DefaultShutdownTimeout, "on SIGINT/SIGTERM, time connections have to finish before they are cut")
	securityFlagsOn(fs, cfg, "accept plain TCP, without TLS: packets cross the network in clear text and, without --token-file, anyone who reaches the port writes as any agent; needed for --listen-udp (with --tls-cert, TCP keeps TLS and this admits only UDP)")
	fs.IntVar(&cc.MaxConns, "max-conns", 0, "most agent connections open at once, handshakes included; more are closed at once, logged and counted; 0: what RLIMIT_NOFILE leaves beside --max-open-files, 256 and the other listeners' caps")
	fs.IntVar(&cc.MaxConnsPerSource, "max-conns-per-source", 0, "most agent connections of one address open at once; 0: a quarter of --max-conns (at least 4)")
	fs.DurationVar(&cc.Heartbeat, "heartbeat", liveness.DefaultHeartbeat, "re-send the last acknowledgement when nothing was sent for this long, so agents know the collector is alive")
	fs.DurationVar(&cc.PeerTimeout, "peer-timeout", liveness.DefaultPeerTimeout, "end a session whose agent sent nothing (not even its heartbeat) for this long; also TCP_USER_TIMEOUT")
	metricsFlagsOn(fs, &cfg.Metrics, metrics.DefaultCollectorPort)
	kafkaFlagsOn(fs, &cfg.Kafka, "produce every batch to Kafka instead of writing files (an ingest collector: no --dir; `pcapsync writer` writes the files)")
	return feedFlags(fs, cfg)
}

// securityFlagsOn defines the TLS, token and --insecure flags of a
// collector or writer.
func securityFlagsOn(fs *pflag.FlagSet, cfg *serve.Config, insecureHelp string) {
	fs.StringVar(&cfg.TLSCertFile, "tls-cert", "", "the collector's TLS certificate (PEM; may hold the chain)")
	fs.StringVar(&cfg.TLSKeyFile, "tls-key", "", "the key of --tls-cert (PEM)")
	fs.StringVar(&cfg.TLSClientCAFile, "tls-client-ca", "", "require client certificates signed by these CAs (PEM); an agent's name must then be its certificate's CN or a DNS name")
	fs.StringVar(&cfg.TokenFile, "token-file", "", "require this shared token (16 to 128 bytes; surrounding white space is ignored) in every agent's hello, tap request and query")
	fs.BoolVar(&cfg.Collector.Insecure, "insecure", false, insecureHelp)
}

// retainFlagsOn defines the collector's retention flags.
func retainFlagsOn(fs *pflag.FlagSet, rc *store.RetainConfig) {
	fs.Var(retainFreeFlag{rc}, "retain-free", "keep at least this much of the filesystem holding --dir free, as a percentage (10%) or a size (20G), by deleting the oldest closed files (by last packet, all agents; each agent's newest stays); counts every program's use of the disk; 0 turns it off")
	fs.Var(sizeFlag{&rc.MaxBytes}, "retain-size", "keep the agents' files below --dir at most this large, deleting the oldest closed files (by last packet, all agents; each agent's newest stays); 0: no limit")
	fs.DurationVar(&rc.MaxAge, "retain-age", 0, "delete the files whose last packet is older than this, e.g. 720h; 0: none")
	fs.Var(sizeFlag{&rc.AgentBytes}, "retain-agent-size", "keep each agent's files at most this large, deleting its own oldest, so that one busy agent cannot push out the others' history; 0: no limit")
}

// metricsFlagsOn defines the metrics flags of a collector or a writer,
// whose usual port (metrics.DefaultXPort) is port.
func metricsFlagsOn(fs *pflag.FlagSet, m *metrics.Config, port int) {
	fs.StringVar(&m.Addr, "metrics", "", metricsUsage(port, "/metrics and /status"))
	fs.BoolVar(&m.Pprof, "pprof", false, "with --metrics, also serve Go's profiler at /debug/pprof/ (no authentication)")
	fs.IntVar(&m.MaxConns, "metrics-max-conns", 0, "with --metrics: most connections open at once (a quarter, at least 4, per address); 0: (RLIMIT_NOFILE - 256 - --max-open-files) / 16, at most "+strconv.Itoa(metrics.DefaultMaxConns))
	fs.IntVar(&m.MaxAgents, "metrics-max-agents", metrics.DefaultMaxAgents, "agent names with their own \"agent\" label value in the metrics (the first in sorted order); the others are summed under \""+metrics.OtherAgents+"\"; -1 for no cap")
}

// consoleFlags defines --console-listen and --console-max-conns.
func consoleFlags(fs *pflag.FlagSet, cfg *serve.Config) {
	fs.StringVar(&cfg.Console.Listen, "console-listen", "", "serve the read-only browser console of the output root on `HOST:PORT` (agents, flows, packets, pcapng download): HTTPS with the collector's certificate, users log in with --token-file's token or a client certificate; plain HTTP with --insecure, or on a loopback address (see docs/console.md)")
	fs.IntVar(&cfg.Console.MaxConns, "console-max-conns", 0, "with --console-listen: most connections open at once (a quarter, at least 4, per address); 0: (RLIMIT_NOFILE - 256 - --max-open-files) / 16, at most "+strconv.Itoa(queryhttp.DefaultMaxConns))
}

// feedFlags defines the --tap, --redis and --query-listen flags; their
// settings are given-only: each flag writes into a variable of its own,
// copied into cfg only when the flag was given (apply).
func feedFlags(fs *pflag.FlagSet, cfg *serve.Config) givenOnly {
	t, r, q := &cfg.Tap, &cfg.Redis, &cfg.Query
	g := givenOnly{}
	consoleFlags(fs, cfg)
	fs.StringVar(&q.Listen, "query-listen", "", "serve pcapsync query over HTTPS on `HOST:PORT` (pcapsync query --from, curl): TLS, client certificates and token as for agents; plain HTTP with --insecure, or on a loopback address (see docs/query.md)")
	fs.IntVar(given(g, "query-max", &q.MaxQueries, queryhttp.DefaultMaxQueries), "query-max", queryhttp.DefaultMaxQueries, "with --query-listen: queries running at once; more are refused (503)")
	fs.IntVar(&q.MaxConns, "query-max-conns", 0, "with --query-listen: most connections open at once, handshakes and idle ones included (a quarter, at least 4, per address); 0: (RLIMIT_NOFILE - 256 - --max-open-files) / 8, at most "+strconv.Itoa(queryhttp.DefaultMaxConns))
	fs.Func("tap", "serve a live pcapng stream of what is written on `HOST:PORT[=AGENT[:IFACE]]` (repeatable): \"wireshark -k -i TCP@HOST:PORT\" sees AGENT (default every agent), \"pcapsync tail\" asks for any; plain TCP on loopback, TLS like the agents' listener elsewhere (see docs/tap.md)", func(s string) error {
		l, err := tap.ParseListener(s)
		t.Listen = append(t.Listen, l)
		return err
	})
	annotate(fs, "tap", annRepeatable)
	fs.IntVar(&t.MaxConns, "tap-max-conns", 0, "with --tap: most connections of each tap listener open at once, handshakes included (a quarter, at least 4, per address); 0: (RLIMIT_NOFILE - 256 - --max-open-files) / 8 / the tap listeners, at most "+strconv.Itoa(tap.DefaultMaxConns))
	fs.Var(intSizeFlag{given(g, "tap-queue", &t.QueueSize, tap.DefaultQueueSize)}, "tap-queue", "bytes of packets queued per tap client; a client further behind is dropped (counted), never waited for")
	fs.StringVar(&r.URL, "redis", "", "also publish every written batch to a Redis Stream per agent at this URL (redis://[:PASSWORD@]HOST:PORT[/DB], rediss://, unix:///PATH); Redis down or slow never holds up the files: batches are dropped and counted")
	fs.StringVar(given(g, "redis-prefix", &r.Prefix, redisfeed.DefaultPrefix), "redis-prefix", redisfeed.DefaultPrefix, "with --redis: the stream of agent NAME is PREFIX+NAME")
	sp := redisfeed.DefaultCompress
	fs.TextVar(&sp, "redis-compress", redisfeed.DefaultCompress, "with --redis: compress the records of each entry: s2, zstd[:1-22] or none")
	g["redis-compress"] = func() { r.Compress = &sp }
	fs.Int64Var(given(g, "redis-maxlen", &r.MaxLen, redisfeed.DefaultMaxLen), "redis-maxlen", redisfeed.DefaultMaxLen, "with --redis: keep about this many entries per stream (XADD MAXLEN ~)")
	fs.DurationVar(given(g, "redis-max-age", &r.MaxAge, 0), "redis-max-age", 0, "with --redis: keep the entries of about this long instead of --redis-maxlen (XADD MINID ~), e.g. 10m")
	fs.Var(sizeFlag{given(g, "redis-queue", &r.QueueBytes, redisfeed.DefaultQueueBytes)}, "redis-queue", "with --redis: memory for batches waiting to be published; when full, batches are dropped and counted")
	fs.DurationVar(given(g, "redis-timeout", &r.Timeout, redisfeed.DefaultTimeout), "redis-timeout", redisfeed.DefaultTimeout, "with --redis: the longest a connect or one round trip to Redis may take")
	return g
}

// givenOnly maps flags to what sets their Config fields, run by apply
// only when the flag was given (on the command line, in the environment
// or in the configuration file): a field whose flag was not given stays
// zero, which the package reads as its default, so that a tap or Redis
// setting the user did not ask for is not one Validate refuses without
// its --tap or --redis.
type givenOnly map[string]func()

// given returns a variable for flag name's value, holding def, and
// records in g that field takes its value once the flag was given.
func given[T any](g givenOnly, name string, field *T, def T) *T {
	v := def
	g[name] = func() { *field = v }
	return &v
}

// apply sets the fields of the flags of fs that were given.
func (g givenOnly) apply(fs *pflag.FlagSet) {
	for name, set := range g {
		if fs.Changed(name) {
			set()
		}
	}
}
