package serve

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/pcapsync/pcapsync/internal/fielderr"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcapsync/pcapsync/internal/collector"
	"github.com/pcapsync/pcapsync/internal/console"
	"github.com/pcapsync/pcapsync/internal/frontdoor"
	"github.com/pcapsync/pcapsync/internal/kafkaconn"
	"github.com/pcapsync/pcapsync/internal/kafkaio"
	"github.com/pcapsync/pcapsync/internal/kafkarec"
	"github.com/pcapsync/pcapsync/internal/metrics"
	"github.com/pcapsync/pcapsync/internal/pki"
	"github.com/pcapsync/pcapsync/internal/queryhttp"
	"github.com/pcapsync/pcapsync/internal/redisfeed"
	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/tap"
)

// Service is a collector process built by New; Run runs it once.
type Service struct {
	cfg Config
	log *slog.Logger

	core  *collector.Core
	ln    net.Listener         // the agents'; nil for a writer
	door  *frontdoor.Listener  // ln's front door, made once the core is
	udp   *collector.UDPServer // nil without ListenUDP
	uconn *net.UDPConn
	tap   *tap.Tap            // nil without tap listeners
	redis *redisfeed.Feed     // nil without a Redis URL
	msrv  *metrics.Server     // nil without a metrics address
	query *queryhttp.Server   // nil without a query listener
	cons  *queryhttp.Server   // the console's front door; nil without one
	page  *metrics.StatusPage // GET /status of the metrics and query listeners; nil without either
	m     *metrics.Collector

	kopts  []kgo.Opt           // the Kafka connection's options
	rkey   *kafkarec.RecordKey // the record key; nil: none
	prod   *kafkarec.Producer  // an ingest collector's; nil otherwise
	writer *kafkaio.Writer     // a writer's; nil otherwise

	// intake runs what brings batches in (the agents' TCP server, or
	// the writer's consumer) until ctx ends, then lets what is in
	// flight end: the role's.
	intake func(ctx context.Context) error

	closers []func() // what New opened, in order; undone if New fails
}

// New validates cfg, reads the files it names, opens the store (see
// collector.NewCore: unfinished files are repaired in the background)
// and every listener, and returns the Service ready to Run. On an
// error everything it opened is closed again.
func New(cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	s := &Service{cfg: cfg, log: cfg.Logger}
	if err := s.open(); err != nil {
		for i := len(s.closers) - 1; i >= 0; i-- {
			s.closers[i]()
		}
		return nil, err
	}
	return s, nil
}

// open does New's work, the role's assembly; s.closers undo it.
func (s *Service) open() error {
	c := &s.cfg
	if err := s.loadFiles(); err != nil {
		return err
	}
	c.Collector.Logger = cmp.Or(c.Collector.Logger, c.Logger)
	if c.Metrics.Addr != "" {
		if err := s.openMetrics(); err != nil {
			return err
		}
	}
	var err error
	switch c.Role {
	case RoleIngest:
		err = s.openIngest()
	case RoleWriter:
		err = s.openWriter()
	default:
		err = s.openCollector()
	}
	if err != nil {
		return err
	}
	if s.msrv != nil || s.query != nil || s.cons != nil {
		s.page = metrics.NewStatusPage(s.core, s.udp)
		if s.writer != nil {
			s.page.WatchWriter(s.writer)
		}
	}
	s.watch()
	return nil
}

// status is the query listener's GET /status: what the metrics
// listener's serves.
func (s *Service) status() any { return s.page.Status() }

// openCollector assembles a collector: the feeds, the listeners (the
// agents' TCP and UDP ones), the store and the core.
func (s *Service) openCollector() error {
	if err := s.openCore(true); err != nil {
		return err
	}
	if s.uconn != nil {
		s.udp = collector.NewUDPServer(s.core)
	}
	s.door = s.core.Door(s.ln)
	s.intake = func(ctx context.Context) error { return collector.NewServer(s.core).Serve(ctx, s.door) }
	return nil
}

// openIngest assembles an ingest collector: the Kafka producer as the
// core's sink, the agents' TCP listener, no store.
func (s *Service) openIngest() error {
	if err := s.openKafka(); err != nil { // and the producer
		return err
	}
	if err := s.openCore(true); err != nil {
		return err
	}
	s.door = s.core.Door(s.ln)
	s.intake = func(ctx context.Context) error {
		err := collector.NewServer(s.core).Serve(ctx, s.door)
		// What the sessions sent is answered, or fails.
		return errors.Join(err, s.prod.Close(s.cfg.Collector.ShutdownTimeout))
	}
	return nil
}

// openWriter assembles a writer: the topic, the feeds, the shared store
// and the core, and the consumer writing into it; no agents' listener.
func (s *Service) openWriter() error {
	c := &s.cfg
	cc := &c.Collector
	if cc.Store.Shared {
		cc.Store.Group = c.Group // the group's writers share the root; another owner is refused
	}
	if err := s.openKafka(); err != nil {
		return err
	}
	if err := s.openCore(false); err != nil {
		return err
	}
	wc := kafkaio.WriterConfig{Opts: s.kopts, Topic: c.Kafka.Topic, Group: c.Group,
		Core: s.core, Release: s.core.Store().Release, MaxFrame: cc.MaxFrame, Key: s.rkey,
		IdleRelease: cc.Store.IdleClose, Logger: c.Logger}
	if s.m != nil {
		wc.Delay = s.m.RecordDelay
	}
	var err error
	if s.writer, err = kafkaio.NewWriter(wc); err != nil {
		return err
	}
	s.intake = s.writer.Run
	return nil
}

// openMetrics makes the metrics' collector, the core's latency
// observers and the certificates' expiry.
func (s *Service) openMetrics() error {
	c := &s.cfg
	cc := &c.Collector
	s.m = metrics.NewCollector(c.Metrics.MaxAgents)
	cc.BatchWriteLatency, cc.Store.SyncLatency = s.m.BatchWrite, s.m.Sync
	certs, err := pki.CertificateFiles([2]string{pki.RoleCert, c.TLSCertFile}, [2]string{pki.RoleCA, c.TLSClientCAFile},
		[2]string{pki.RoleCert, c.Kafka.CertFile}, [2]string{pki.RoleCA, c.Kafka.CAFile})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	metrics.WatchCertificates(s.m.Registry, certs)
	return nil
}

// openCore checks the collector's Config again (the token read), splits
// the descriptors, opens the feeds and the listeners (with agents: their
// TCP and UDP ones), switches the user and makes the core: the store
// opens there (a sink's core has none).
func (s *Service) openCore(agents bool) error {
	c := &s.cfg
	cc := &c.Collector
	if err := cc.Validate(); err != nil { // again, with the token read
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if err := s.budget(frontdoor.NoFileLimit()); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	var feeds collector.Feeds
	if err := s.openFeeds(&feeds); err != nil {
		return err
	}
	if len(feeds) > 0 {
		cc.Feed = feeds
	}
	if err := s.bind(agents); err != nil {
		return err
	}
	if c.BeforeStore != nil {
		if err := c.BeforeStore(); err != nil {
			return err
		}
	}
	core, err := collector.NewCore(*cc)
	if errors.Is(err, store.ErrRootUnusable) {
		err = fmt.Errorf("%w: %w", ErrConfig, err) // put right by hand, not by starting again
	}
	if err != nil {
		return err
	}
	s.core = core
	s.closers = append(s.closers, func() { core.Close() })
	return nil
}

// budget derives the connection caps left zero, for nofile descriptors (--max-conns, the tap's,
// the query listener's, the metrics listener's) from RLIMIT_NOFILE, less
// the store's open-file budget and frontdoor.Reserve, and refuses caps
// that together need more descriptors than the process may hold: no
// client can then take the descriptors the store needs.
func (s *Service) budget(nofile uint64) error {
	c := &s.cfg
	files := 0
	if c.Role.writesFiles() {
		// With no budget (-1) the store takes what it needs: the caps
		// are split as by default.
		if files = c.Collector.Store.MaxOpenFiles; files <= 0 {
			files = store.DefaultMaxOpenFiles(nofile)
		}
	}
	var shares []frontdoor.Share
	if c.Role.takesAgents() {
		shares = append(shares, frontdoor.Share{Field: fielderr.Key("serve.Collector.MaxConns"), Cap: &c.Collector.MaxConns})
	}
	if n := len(c.Tap.Listen); n > 0 {
		shares = append(shares, frontdoor.Share{Field: fielderr.Key("serve.Tap.MaxConns"), Cap: &c.Tap.MaxConns, Listeners: n, Divisor: 8, Max: tap.DefaultMaxConns})
	}
	if c.Query.Listen != "" {
		shares = append(shares, frontdoor.Share{Field: fielderr.Key("serve.Query.MaxConns"), Cap: &c.Query.MaxConns, Divisor: 8, Max: queryhttp.DefaultMaxConns})
	}
	if c.Console.Listen != "" {
		shares = append(shares, frontdoor.Share{Field: fielderr.Key("serve.Console.MaxConns"), Cap: &c.Console.MaxConns, Divisor: 16, Max: queryhttp.DefaultMaxConns})
	}
	if c.Metrics.Addr != "" {
		shares = append(shares, frontdoor.Share{Field: fielderr.Key("serve.Metrics.MaxConns"), Cap: &c.Metrics.MaxConns, Divisor: 16, Max: metrics.DefaultMaxConns})
	}
	return frontdoor.Budget(nofile, files, fielderr.Key("serve.Collector.Store.MaxOpenFiles"), shares)
}

// loadFiles reads the TLS files and the token file into the collector's
// Config.
func (s *Service) loadFiles() error {
	c := &s.cfg
	if c.TLSCertFile != "" {
		tc, err := pki.ServerConfig(c.TLSCertFile, c.TLSKeyFile, c.TLSClientCAFile)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
		pki.LogCertificates(s.log, tc, c.TLSCertFile)
		c.Collector.TLS = tc
	}
	if c.TokenFile != "" {
		tok, err := pki.ReadToken(c.TokenFile, s.log)
		if errors.Is(err, pki.ErrEmptyToken) {
			err = fmt.Errorf("%w: %w", ErrConfig, err)
		}
		if err != nil {
			return err
		}
		c.Collector.Token = tok
	}
	return nil
}

// openFeeds opens the tap's listeners and makes the Redis feed, adding
// them to feeds.
func (s *Service) openFeeds(feeds *collector.Feeds) error {
	c := &s.cfg
	if len(c.Tap.Listen) > 0 {
		tc := c.Tap
		tc.TLS, tc.Token, tc.Logger = c.Collector.TLS, c.Collector.Token, c.Logger
		t, err := tap.New(tc)
		if err != nil {
			return err
		}
		s.tap = t
		s.closers = append(s.closers, func() { t.Close() })
		*feeds = append(*feeds, t)
	}
	if c.Redis.URL != "" {
		rc := c.Redis
		rc.Logger = c.Logger
		redisfeed.LogClientTo(c.Logger)
		f, err := redisfeed.New(rc)
		if err != nil {
			return err
		}
		s.redis = f
		s.closers = append(s.closers, func() { f.Close(context.Background()) })
		*feeds = append(*feeds, f)
	}
	return nil
}

// bind opens the metrics and query listeners, then, with agents, the
// agents' TCP and UDP ones.
func (s *Service) bind(agents bool) error {
	c := &s.cfg
	if c.Metrics.Addr != "" {
		srv, err := metrics.Listen(c.Metrics)
		if err != nil {
			return err
		}
		s.msrv = srv
		s.closers = append(s.closers, func() { srv.Close() })
	}
	if c.Query.Listen != "" {
		qc := c.Query
		qc.Dir, qc.TLS, qc.Token, qc.Logger = c.Collector.Store.Dir, c.Collector.TLS, c.Collector.Token, c.Logger
		qc.Status = s.status // s.page, made once the core is (open)
		q, err := queryhttp.New(qc)
		if err != nil {
			return err
		}
		s.query = q
		s.closers = append(s.closers, func() { q.Close() })
		if s.m != nil {
			s.m.WatchQuery(&q.Counters)
		}
	}
	if err := s.bindConsole(); err != nil {
		return err
	}
	if !agents {
		return nil
	}
	ln, err := frontdoor.ListenTCP(cmp.Or(c.Listen, DefaultListen))
	if err != nil {
		return err
	}
	s.ln = ln
	s.closers = append(s.closers, func() { ln.Close() })
	if c.ListenUDP != "" {
		if s.uconn, err = frontdoor.ListenUDP(c.ListenUDP); err != nil {
			return fielderr.Errorf("{serve.ListenUDP}: %w", err)
		}
		s.closers = append(s.closers, func() { s.uconn.Close() })
	}
	return nil
}

// watch registers the metrics of every part.
func (s *Service) watch() {
	if s.m != nil {
		s.m.Watch(s.core, s.udp)
		s.watchDoors()
		if s.writer != nil {
			s.m.WatchWriter(&s.writer.Counters, s.writer)
		}
		if s.tap != nil {
			s.m.WatchTap(&s.tap.Counters)
		}
		if s.redis != nil {
			s.m.WatchRedis(&s.redis.Counters)
		}
		if s.prod != nil {
			s.m.WatchProducer(&s.prod.Counters)
		}
	}
}

// watchDoors registers the connection counters of every listener.
func (s *Service) watchDoors() {
	reg := s.m.Registry
	if s.door != nil {
		metrics.WatchListener(reg, "agents", s.door.Addr().String(), &s.door.Counters)
	}
	if s.tap != nil {
		for _, d := range s.tap.Doors() {
			metrics.WatchListener(reg, "tap", d.Addr().String(), &d.Counters)
		}
	}
	if s.query != nil {
		metrics.WatchListener(reg, "query", s.query.Addr(), s.query.Conns())
	}
	if s.cons != nil {
		metrics.WatchListener(reg, "console", s.cons.Addr(), s.cons.Conns())
	}
	if s.msrv != nil {
		metrics.WatchListener(reg, "metrics", s.msrv.Addr(), s.msrv.Conns())
	}
}

// Core returns the collector's core: its Counters, its Store's.
func (s *Service) Core() *collector.Core { return s.core }

// Writer returns a writer's Kafka consumer; nil for every other role.
func (s *Service) Writer() *kafkaio.Writer { return s.writer }

// UDP returns the UDP intake, nil without Config.ListenUDP.
func (s *Service) UDP() *collector.UDPServer { return s.udp }

// Tap returns the tap, nil without tap listeners.
func (s *Service) Tap() *tap.Tap { return s.tap }

// Redis returns the Redis feed, nil without a Redis URL.
func (s *Service) Redis() *redisfeed.Feed { return s.redis }

// bindConsole opens the console's listener: the query listener's front
// door (TLS, client certificates, plain HTTP on loopback) before
// console.Handler, which takes the collector's token at its login.
func (s *Service) bindConsole() error {
	c := &s.cfg
	if c.Console.Listen == "" {
		return nil
	}
	tc := c.Collector.TLS
	h, err := console.New(console.Config{Dir: c.Collector.Store.Dir, Status: s.status, Token: c.Collector.Token, Logger: c.Logger})
	if err != nil {
		return err
	}
	srv, err := queryhttp.New(queryhttp.Config{Listen: c.Console.Listen, MaxConns: c.Console.MaxConns, Dir: c.Collector.Store.Dir,
		TLS: tc, Handler: h, Name: "console", Logger: c.Logger})
	if err != nil {
		return err
	}
	s.cons = srv
	s.closers = append(s.closers, func() { srv.Close() })
	return nil
}

// Console returns the console's listener, nil without
// Config.Console.Listen.
func (s *Service) Console() *queryhttp.Server { return s.cons }

// Query returns the query listener, nil without Config.Query.Listen.
func (s *Service) Query() *queryhttp.Server { return s.query }

// Addr returns the address agents connect to over TCP.
func (s *Service) Addr() net.Addr { return s.ln.Addr() }

// Run serves agents until ctx ends, then shuts everything down in
// order (see the package documentation) and returns the errors of the
// intakes, the tap and the core's close, joined.
func (s *Service) Run(ctx context.Context) error {
	s.logStart()
	bg := context.Background()
	tickCtx, stopTick := context.WithCancel(bg)
	ticked := goRun(func() error { s.core.Run(tickCtx); return nil })
	stopMetrics := func() {}
	if s.page != nil {
		go s.page.Run(tickCtx)
	}
	if s.msrv != nil {
		mctx, cancel := context.WithCancel(bg)
		done := goRun(func() error { return s.msrv.Run(mctx, s.msrv.Handler(s.m.Registry, s.page), s.log) })
		stopMetrics = func() { cancel(); <-done }
	}
	stopRedis := func() {}
	if s.redis != nil {
		rctx, cancel := context.WithCancel(bg)
		done := goRun(func() error { return s.redis.Run(rctx) })
		stopRedis = func() { cancel(); <-done }
	}
	queryDone := goRun(func() error { // stops its queries when ctx ends
		if s.query == nil {
			return nil
		}
		return s.query.Run(ctx)
	})
	consDone := goRun(func() error {
		if s.cons == nil {
			return nil
		}
		return s.cons.Run(ctx)
	})
	stopTap := func() error { return nil }
	if s.tap != nil {
		tctx, cancel := context.WithCancel(bg)
		done := goRun(func() error { return s.tap.Run(tctx) })
		stopTap = func() error { cancel(); return <-done }
	}
	udpDone := goRun(func() error {
		if s.udp == nil {
			return nil
		}
		return s.udp.Serve(ctx, s.uconn)
	})
	serr := s.intake(ctx)
	uerr := <-udpDone
	qerr := errors.Join(<-queryDone, <-consDone)
	terr := stopTap() // after the last batch was written
	stopTick()
	<-ticked
	cerr := s.core.Close()
	stopMetrics()
	stopRedis() // after the core closed: no more batches come
	return errors.Join(serr, uerr, qerr, terr, cerr)
}

// goRun runs f on a goroutine of its own; the channel gets its error.
func goRun(f func() error) <-chan error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	return done
}

func (s *Service) logStart() {
	c := &s.cfg.Collector
	if s.cfg.Role == RoleWriter {
		attrs := []any{"brokers", strings.Join(s.cfg.Kafka.Brokers, ","), "topic", s.cfg.Kafka.Topic,
			"group", s.cfg.Group, "dir", c.Store.Dir}
		attrs = s.listenerAttrs(attrs)
		s.log.Info("writer consuming", attrs...)
		return
	}
	attrs := []any{"addr", s.ln.Addr().String(), "max_conns", c.MaxConns, "dir", c.Store.Dir, "tls", c.TLS != nil,
		"client_certificates", c.TLS != nil && c.TLS.ClientAuth == tls.RequireAndVerifyClientCert, "token", c.Token != ""}
	if s.uconn != nil {
		attrs = append(attrs, "udp", s.uconn.LocalAddr().String())
	}
	if s.tap != nil {
		attrs = append(attrs, "tap", strings.Join(s.tap.Addrs(), ","))
	}
	attrs = s.listenerAttrs(attrs)
	s.log.Info("collector listening", attrs...)
}

// listenerAttrs adds the query and console listeners' addresses.
func (s *Service) listenerAttrs(attrs []any) []any {
	if s.query != nil {
		attrs = append(attrs, "query", s.query.Addr())
	}
	if s.cons != nil {
		attrs = append(attrs, "console", s.cons.Addr())
	}
	return attrs
}

// openKafka connects an ingest collector or a writer to Kafka: it
// creates the topic when absent and, for an ingest collector, makes the
// producer the core's sink, its records as large as the topic takes.
func (s *Service) openKafka() error {
	c := &s.cfg
	opts, err := c.Kafka.Opts()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	s.kopts = opts
	if s.rkey, err = recordKey(c.Kafka); err != nil {
		return err
	}
	cl, err := c.Kafka.NewClient()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), kafkaStartTimeout)
	defer cancel()
	created, err := kafkaconn.EnsureTopic(ctx, cl, c.Kafka)
	if err != nil {
		return fmt.Errorf("kafka topic %q: %w", c.Kafka.WithDefaults().Topic, err)
	}
	kc := c.Kafka.WithDefaults()
	if created {
		s.log.Info("kafka topic created", "topic", kc.Topic, "partitions", kc.Partitions, "replication", kc.Replication)
	}
	if c.Role != RoleIngest {
		return nil
	}
	maxRecord, err := kafkaconn.MaxRecordBytes(ctx, cl, kc.Topic)
	if err != nil {
		return fmt.Errorf("kafka topic %q: reading its record size limit: %w", kc.Topic, err)
	}
	return s.openProducer(maxRecord)
}

// openProducer makes an ingest collector's producer, the core's sink,
// its records at most maxRecord bytes, as the topic takes.
func (s *Service) openProducer(maxRecord int) error {
	c := &s.cfg
	kc := c.Kafka.WithDefaults()
	pc := kafkarec.ProducerConfig{Opts: s.kopts, Topic: kc.Topic, MaxRecord: maxRecord, Key: s.rkey, Logger: s.log}
	if s.m != nil {
		pc.Latency = s.m.Produce
	}
	p, err := kafkarec.NewProducer(pc)
	if err != nil {
		return err
	}
	s.prod = p
	s.closers = append(s.closers, func() { p.Close(time.Second) })
	c.Collector.Sink = p
	return nil
}

// recordKey reads kc's record key file, if any, and a writer's previous
// key file (ErrConfig when either is unusable): the topic's keys, which
// ingest collectors and writers sign and check every agent's records
// with, not an agent's.
func recordKey(kc kafkaconn.Config) (*kafkarec.RecordKey, error) {
	k, err := topicKey(kc.RecordKeyFile, kc.RecordKey)
	if err != nil || k == nil {
		if err == nil && kc.PreviousRecordKeyFile != "" {
			err = fmt.Errorf("kafka: a previous record key without a record key: %w", kafkarec.ErrBadKeyFile)
		}
		return nil, wrapConfig(err)
	}
	prev, err := topicKey(kc.PreviousRecordKeyFile, kc.PreviousRecordKey)
	switch {
	case err != nil:
		return nil, wrapConfig(err)
	case prev == nil:
		return k, nil
	}
	k, err = k.WithPrevious(prev)
	return k, wrapConfig(err)
}

// topicKey reads the topic's record key from file with read: nil when
// no file is set, an error for an agent's key.
func topicKey(file string, read func() ([]byte, error)) (*kafkarec.RecordKey, error) {
	b, err := read()
	if err != nil || b == nil {
		return nil, err
	}
	k, err := kafkarec.ParseRecordKey(b)
	clear(b)
	if a := k.Agent(); err == nil && a != "" {
		k, err = nil, fmt.Errorf("kafka: %s holds agent %q's record key; ingest collectors and writers need the topic's: %w", file, a, kafkarec.ErrBadKeyFile)
	}
	return k, err
}

// wrapConfig wraps a non-nil err in ErrConfig.
func wrapConfig(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrConfig, err)
}

// kafkaStartTimeout bounds the wait for the brokers at start.
const kafkaStartTimeout = 60 * time.Second
