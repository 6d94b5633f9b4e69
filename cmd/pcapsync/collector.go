package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/pcapsync/pcapsync/internal/collector"
	"github.com/pcapsync/pcapsync/internal/liveness"
	"github.com/pcapsync/pcapsync/internal/metrics"
	"github.com/pcapsync/pcapsync/internal/pki"
	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// DefaultPort is wire.DefaultPort, for the flags' help texts.
var DefaultPort = strconv.Itoa(wire.DefaultPort)

func runCollector(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("collector", `pcapsync collector --dir DIR [--listen HOST:PORT] (--tls-cert FILE --tls-key FILE [--tls-client-ca FILE] | --insecure) [--token-file FILE] [flags]

Accepts agents and writes what they capture into pcapng files. Agents
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
pcapsync tail --collector-admin HOST:PORT asks for any agent, interface
and filter. Plain TCP on a loopback address, TLS like the agents' port
elsewhere; --token-file applies (docs/tap.md).`, stderr)
	var cfg collector.Config
	listen := fs.String("listen", "127.0.0.1:"+DefaultPort, "address to accept agents on (use 0.0.0.0:"+DefaultPort+" or [::]:"+DefaultPort+" for every interface)")
	listenUDP := fs.String("listen-udp", "", "also accept agents over UDP (--transport udp) on this HOST:PORT, e.g. 0.0.0.0:"+DefaultPort+"; plaintext: needs --insecure")
	fs.StringVar(&cfg.Store.Dir, "dir", "", "output root: files go to DIR/<agent>/<agent>_<UTC start>.pcapng (required)")
	rotateSize := int64(store.DefaultRotateSize)
	fs.Var(sizeFlag{&rotateSize}, "rotate-size", "start a new file once one reaches this size, e.g. 100M, 1G; 0 disables")
	fs.DurationVar(&cfg.Store.RotateInterval, "rotate-interval", store.DefaultRotateInterval, "start a new file at every wall-clock multiple of this interval (UTC; 1h turns over on the hour); 0 disables")
	fs.TextVar(&cfg.Store.FileCompress, "file-compress", cfg.Store.FileCompress, "compress the files: none, gzip[:1-9] or zstd[:1-22] (.pcapng.gz, .pcapng.zst; Wireshark, tshark and capinfos read them; every acknowledgement ends a gzip member or zstd frame)")
	fsync := fs.String("fsync", store.DefaultFsync.String(), "when written data is synced to disk: batch (before every acknowledgement), never (left to the OS; closed files are synced anyway unless never), or an interval such as 1s (an acknowledgement then means written to the OS: safe if the collector crashes, an OS crash can lose up to the interval)")
	fs.DurationVar(&cfg.Store.IdleClose, "idle-close", store.DefaultIdleClose, "close an agent's file this long after its connection broke without a goodbye")
	maxFrame := int64(collector.DefaultMaxFrame)
	fs.Var(sizeFlag{&maxFrame}, "max-frame", "largest frame accepted from an agent")
	cfg.UDPReassemblyBytes = collector.DefaultUDPReassemblyBytes
	fs.Var(sizeFlag{&cfg.UDPReassemblyBytes}, "udp-reassembly-mem", "with --listen-udp: memory for batches arriving in pieces (a packet larger than a datagram), all agents together; over it the oldest incomplete one is dropped and counted")
	readMemory := int64(collector.DefaultReadMemory)
	fs.Var(sizeFlag{&readMemory}, "read-memory", "memory for frames being received over TCP, all connections together (at least --max-frame); over it, connections stop reading until memory is free")
	fs.DurationVar(&cfg.HandshakeTimeout, "handshake-timeout", collector.DefaultHandshakeTimeout, "time a new connection has to complete its handshake")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", collector.DefaultShutdownTimeout, "on SIGINT/SIGTERM, time connections have to finish before they are cut")
	tlsCert := fs.String("tls-cert", "", "the collector's TLS certificate (PEM; may hold the chain)")
	tlsKey := fs.String("tls-key", "", "the key of --tls-cert (PEM)")
	clientCA := fs.String("tls-client-ca", "", "require client certificates signed by these CAs (PEM); an agent's name must then be its certificate's CN or a DNS name")
	tokenFile := fs.String("token-file", "", "require this shared token (16 to 128 bytes; surrounding white space is ignored) in every agent's hello")
	fs.BoolVar(&cfg.Insecure, "insecure", false, "accept plain TCP, without TLS: packets cross the network in clear text and, without --token-file, anyone who reaches the port writes as any agent; needed for --listen-udp (with --tls-cert, TCP keeps TLS and this admits only UDP)")
	fs.IntVar(&cfg.MaxConns, "max-conns", collector.DefaultMaxConns, "most connections open at once; more are closed at once, logged and counted")
	fs.DurationVar(&cfg.Heartbeat, "heartbeat", liveness.DefaultHeartbeat, "re-send the last acknowledgement when nothing was sent for this long, so agents know the collector is alive")
	fs.DurationVar(&cfg.PeerTimeout, "peer-timeout", liveness.DefaultPeerTimeout, "end a session whose agent sent nothing (not even its heartbeat) for this long; also TCP_USER_TIMEOUT")
	var mf metricsFlags
	mf.register(fs)
	maxAgents := fs.Int("metrics-max-agents", metrics.DefaultMaxAgents, "agent names with their own \"agent\" label value in the metrics (the first in sorted order); the others are summed under \""+metrics.OtherAgents+"\"; -1 for no cap")
	redisOpts := addRedisFlags(fs)
	level := fs.String("log-level", "info", "debug, info, warn or error")
	tapf := addTapFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	log, err := newLogger(stderr, *level)
	if err != nil {
		return err
	}
	cfg.Logger = log
	switch {
	case *listenUDP != "" && !cfg.Insecure:
		return fmt.Errorf("%w: --listen-udp: UDP is plaintext (no DTLS): add --insecure (with --tls-cert, TCP keeps TLS and --insecure admits only UDP; --token-file still applies)", errUsage)
	case *tlsCert == "" && *tlsKey == "" && !cfg.Insecure:
		return fmt.Errorf("%w: no transport security chosen: give --tls-cert FILE and --tls-key FILE (with --tls-client-ca FILE to require agent certificates, or --token-file FILE), or --insecure for plain TCP", errUsage)
	case (*tlsCert != "" || *tlsKey != "") && cfg.Insecure && *listenUDP == "":
		return fmt.Errorf("%w: --insecure and --tls-cert/--tls-key exclude each other (except with --listen-udp: TCP keeps TLS, --insecure admits the plaintext UDP listener)", errUsage)
	case *clientCA != "" && *tlsCert == "":
		return fmt.Errorf("%w: --tls-client-ca needs --tls-cert and --tls-key", errUsage)
	case *tlsCert != "":
		if cfg.TLS, err = pki.ServerConfig(*tlsCert, *tlsKey, *clientCA); err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		logCertificate(log, cfg.TLS, *tlsCert)
	}
	if *tokenFile != "" {
		if cfg.Token, err = readToken(*tokenFile, log); err != nil {
			return err
		}
	}
	switch *fsync {
	case "batch":
		cfg.Store.Fsync = store.FsyncPerBatch
	case "never":
		cfg.Store.Fsync = store.FsyncNever
	default:
		d, err := time.ParseDuration(*fsync)
		if err != nil || d <= 0 {
			return fmt.Errorf("%w: --fsync %q: want batch, never or a positive duration like 1s", errUsage, *fsync)
		}
		cfg.Store.Fsync = d
	}
	cfg.Store.RotateSize = disabledIfZero(rotateSize)
	cfg.Store.RotateInterval = time.Duration(disabledIfZero(int64(cfg.Store.RotateInterval)))
	if maxFrame <= 0 || maxFrame > 1<<30 {
		return fmt.Errorf("%w: --max-frame %d out of range", errUsage, maxFrame)
	}
	cfg.MaxFrame = uint32(maxFrame)
	if readMemory <= 0 {
		return fmt.Errorf("%w: --read-memory %d: want a positive size", errUsage, readMemory)
	}
	cfg.ReadMemory = readMemory
	// Live views: each adds itself to feeds (the tap, the Redis feed).
	var feeds collector.Feeds
	taps, err := tapf.listen(&cfg, log)
	if err != nil {
		return err
	}
	defer taps.close()
	if taps != nil {
		feeds = append(feeds, taps.tap)
	}
	rf, err := redisOpts.start(fs, log)
	if err != nil {
		return err
	}
	defer redisOpts.stop(nil) // on an early return; the end prints its summary
	if rf != nil {
		feeds = append(feeds, rf)
	}
	if len(feeds) > 0 {
		cfg.Feed = feeds
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if err := mf.check(); err != nil {
		return err
	}
	if *maxAgents == 0 || *maxAgents < -1 {
		return fmt.Errorf("%w: --metrics-max-agents %d: want a positive number, or -1 for no cap", errUsage, *maxAgents)
	}
	var m *metrics.Collector
	if mf.addr != "" {
		m = metrics.NewCollector(*maxAgents)
		cfg.BatchWriteLatency, cfg.Store.SyncLatency = m.BatchWrite, m.Sync
		if taps != nil {
			m.WatchTap(&taps.tap.Counters)
		}
		if rf != nil {
			m.WatchRedis(&rf.Counters)
		}
	}
	core, err := collector.NewCore(cfg)
	if err != nil {
		return err
	}
	mln, err := mf.listen()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		if mln != nil {
			mln.Close()
		}
		return err
	}
	var udp *collector.UDPServer
	var uconn *net.UDPConn
	attrs := []any{"addr", ln.Addr().String(), "dir", cfg.Store.Dir, "tls", cfg.TLS != nil,
		"client_certificates", *clientCA != "", "token", cfg.Token != ""}
	if *listenUDP != "" {
		ua, err := net.ResolveUDPAddr("udp", *listenUDP)
		if err == nil {
			uconn, err = net.ListenUDP("udp", ua)
		}
		if err != nil {
			ln.Close()
			if mln != nil {
				mln.Close()
			}
			return fmt.Errorf("--listen-udp: %w", err)
		}
		udp = collector.NewUDPServer(core)
		attrs = append(attrs, "udp", uconn.LocalAddr().String())
	}
	if taps != nil {
		attrs = append(attrs, "tap", taps.addrs())
		taps.serve()
	}
	tickCtx, stopTick := context.WithCancel(context.Background())
	stopMetrics := func() {}
	if m != nil {
		m.Watch(core, udp)
		page := metrics.NewStatusPage(core, udp)
		go page.Run(tickCtx)
		stopMetrics = mf.serve(mln, metrics.Handler(m.Registry, metrics.Options{Status: page, Pprof: mf.pprof}), log)
	}
	log.Info("collector listening", attrs...)
	ticked := make(chan struct{})
	go func() { core.Run(tickCtx); close(ticked) }()
	udpDone := make(chan error, 1)
	if udp != nil {
		go func() { udpDone <- udp.Serve(ctx, uconn) }()
	} else {
		udpDone <- nil
	}
	serr := collector.NewServer(core).Serve(ctx, ln)
	uerr := <-udpDone
	var terr error
	if taps != nil {
		terr = taps.finish()
	}
	stopTick()
	<-ticked
	cerr := core.Close()
	stopMetrics()
	c, st := &core.Counters, &core.Store().Counters
	fmt.Fprintf(stdout, "pcapsync collector: sessions %d, rejected %d, protocol errors %d, batches %d, packets %d, bytes %d, duplicates dropped %d, file errors %d, peer timeouts %d, over connection limit %d%s\n",
		c.Sessions.Load(), c.Rejected.Load(), c.ProtocolErrors.Load(), c.Batches.Load(), c.Packets.Load(), c.Bytes.Load(), c.Duplicates.Load(), st.FileErrors.Load(),
		c.PeerTimeouts.Load(), c.OverLimit.Load(), udpSummary(stdout, udp))
	if taps != nil {
		taps.summary(stdout)
	}
	if n := st.Truncated.Load(); n > 0 {
		fmt.Fprintf(stdout, "pcapsync collector: %d packets truncated to their link type's limit (original length kept)\n", n)
	}
	if n := c.MissingBatches.Load(); n > 0 {
		fmt.Fprintf(stdout, "pcapsync collector: LOST %d batches: agents' sequences skipped them (see the log's \"batches missing\" lines)\n", n)
	}
	if n := c.Compressed.Load() + c.BadCompress.Load() + c.TooLargeRaw.Load(); n > 0 {
		fmt.Fprintf(stdout, "pcapsync collector: compressed batches %d (records %d bytes as received, %d decompressed), refused: corrupt %d, over the size limit %d\n",
			c.Compressed.Load(), c.WireBytes.Load(), c.RawBytes.Load(), c.BadCompress.Load(), c.TooLargeRaw.Load())
	}
	redisOpts.stop(stdout) // after the core closed: no more batches come
	return errors.Join(serr, uerr, terr, cerr)
}

// udpSummary prints a line per UDP agent and returns the UDP totals for
// the summary line ("" without UDP).
func udpSummary(stdout io.Writer, udp *collector.UDPServer) string {
	if udp == nil {
		return ""
	}
	agents := udp.AgentCounts()
	var total collector.UDPAgentCounts
	for _, name := range slices.Sorted(maps.Keys(agents)) {
		a := agents[name]
		total.Add(a)
		fmt.Fprintf(stdout, "pcapsync collector: udp agent %s: datagrams %d, lost %d, reordered %d, duplicates %d, late %d, malformed %d, pieces %d, batches reassembled %d, incomplete %d\n",
			name, a.Received, a.Lost, a.Reordered, a.Duplicates, a.Late, a.Malformed, a.Pieces, a.Reassembled, a.Incomplete)
	}
	u := &udp.Counters
	return fmt.Sprintf(", udp datagrams %d, batch datagrams %d, lost %d, reordered %d, late %d, malformed %d, from unknown sources %d, incomplete batches %d (evicted %d)",
		u.Datagrams.Load(), total.Received, total.Lost, total.Reordered, total.Late, u.Malformed.Load(), u.Unknown.Load(), total.Incomplete, u.Evicted.Load())
}

// disabledIfZero maps a user's 0 ("disable") to the Config's negative.
func disabledIfZero(v int64) int64 {
	if v == 0 {
		return -1
	}
	return v
}
