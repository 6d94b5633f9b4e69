package tap

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pcapsync/pcapsync/internal/collector"
	"github.com/pcapsync/pcapsync/internal/filter"
	"github.com/pcapsync/pcapsync/internal/frontdoor"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// Defaults for the zero fields of Config.
const (
	DefaultQueueSize        = 4 << 20
	DefaultMaxClients       = 64
	DefaultRequestWait      = 250 * time.Millisecond
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultWriteTimeout     = 10 * time.Second
	DefaultDrainTimeout     = 5 * time.Second
	DefaultProbeInterval    = time.Second
	// DefaultMaxConns is the connection cap of each listener of a Tap on
	// its own; a collector derives its cap from RLIMIT_NOFILE
	// (frontdoor.Budget), at most this.
	DefaultMaxConns = 256
)

// Config configures a Tap. The zero value means the defaults, no
// listener, no token.
type Config struct {
	// Listen are the listeners New opens and Run serves; none is a
	// Tap fed through Serve only.
	Listen []Listener
	// TLS, if set, is spoken by the listeners' clients (client
	// certificates as it requires), as by the collector's agents; a
	// listener on a loopback address admits plain TCP clients too
	// (which Wireshark's TCP@ needs). nil: plain TCP everywhere.
	TLS *tls.Config
	// Token, if set, must be in every client's request line (compared
	// with frontdoor.TokenEqual, as the agents' hellos are).
	Token string
	// QueueSize bounds the bytes of packets queued for one client; a
	// client that falls further behind is dropped as too slow.
	// 0 means DefaultQueueSize; MinQueueSize..MaxQueueSize.
	QueueSize int
	// MaxClients bounds the clients served at once, over every listener.
	MaxClients int
	// MaxConns bounds the connections of each listener open at once,
	// TLS handshakes and clients not yet served included, and a quarter
	// of it those of one client address (frontdoor.Listener): more are
	// closed at once and counted. 0 means DefaultMaxConns.
	MaxConns int
	// RequestWait is how long a new client has to send its request line
	// (after the TLS handshake, if any) before it gets its listener's
	// default selection.
	RequestWait time.Duration
	// HandshakeTimeout bounds a TLS handshake.
	HandshakeTimeout time.Duration
	// WriteTimeout: a client that takes no bytes for this long is dropped
	// as too slow.
	WriteTimeout time.Duration
	// DrainTimeout bounds how long clients get at shutdown to take what
	// is queued for them.
	DrainTimeout time.Duration
	// ProbeInterval: a client that closed its side of the connection
	// (a process that exited, or `printf REQUEST | ncat` that still
	// reads) and was sent nothing for this long is sent a block that
	// changes nothing in its stream, so that one that is gone resets the
	// connection and is dropped (see client.run).
	ProbeInterval time.Duration
	Logger        *slog.Logger // nil: slog.Default()
}

// Limits of Config.QueueSize.
const (
	MinQueueSize = 64 << 10
	MaxQueueSize = 1 << 30
)

func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.QueueSize, DefaultQueueSize)
	def(&c.MaxClients, DefaultMaxClients)
	def(&c.MaxConns, DefaultMaxConns)
	defDur(&c.RequestWait, DefaultRequestWait)
	defDur(&c.HandshakeTimeout, DefaultHandshakeTimeout)
	defDur(&c.WriteTimeout, DefaultWriteTimeout)
	defDur(&c.DrainTimeout, DefaultDrainTimeout)
	defDur(&c.ProbeInterval, DefaultProbeInterval)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// ListenConfig is one listener's setting (Serve).
type ListenConfig struct {
	// Default is the selection of a client that sends no request line,
	// and what a request's missing fields fall back to.
	Default Selection
	// TLS, if set, is spoken by every client (client certificates as it
	// requires), unless Plain.
	TLS *tls.Config
	// Plain admits plain TCP clients beside TLS ones (told apart by the
	// first byte): for a loopback listener of a TLS collector.
	Plain bool
}

// Counters count a Tap's clients and what they were sent. Safe for
// concurrent use.
type Counters struct {
	Connected   atomic.Int64  // clients being served now
	Clients     atomic.Uint64 // clients served, in total
	Rejected    atomic.Uint64 // refused: TLS, request, token, filter, over MaxClients
	DroppedSlow atomic.Uint64 // cut off: queue full or WriteTimeout without progress
	Packets     atomic.Uint64 // packets sent
	Bytes       atomic.Uint64 // pcapng bytes sent, headers included
}

// Tap is a collector.Feed that streams to the clients of its listeners.
// Its methods are safe for concurrent use.
type Tap struct {
	Counters Counters

	cfg     Config
	log     *slog.Logger
	mu      sync.Mutex                // serialises changes of clients
	clients atomic.Pointer[[]*client] // copy on write: Batch reads it without a lock
	wg      sync.WaitGroup            // connection goroutines
	refused frontdoor.RateLog         // one WARN per interval

	lns []*frontdoor.Listener // Config.Listen, opened by New
	lcs []ListenConfig        // theirs
}

// New validates cfg and returns a Tap with its listeners (Config.Listen)
// open, so that a port already taken fails the start; Run serves them,
// Close closes them unserved. More listeners can be served with Serve.
func New(cfg Config) (*Tap, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	t := &Tap{cfg: cfg, log: cfg.Logger}
	for _, l := range cfg.Listen {
		ln, err := frontdoor.Listen(l.Addr, t.door())
		if err != nil {
			t.Close()
			return nil, fmt.Errorf("tap: %w", err)
		}
		t.lns = append(t.lns, ln)
		t.lcs = append(t.lcs, t.listenConfig(ln, l.Default))
	}
	return t, nil
}

// Batch implements collector.Feed: it copies the packets each client
// selected into the client's queue, or drops the client if that is
// full. It never blocks on a client, and without clients it returns at
// once without allocating.
func (t *Tap) Batch(ev *collector.BatchEvent) {
	cs := t.clients.Load()
	if cs == nil {
		return
	}
	for _, c := range *cs {
		c.offer(ev)
	}
}

// add registers c unless MaxClients are served already.
func (t *Tap) add(c *client) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	var cs []*client
	if p := t.clients.Load(); p != nil {
		cs = *p
	}
	if len(cs) >= t.cfg.MaxClients {
		return false
	}
	cs = append(slices.Clip(cs), c)
	t.clients.Store(&cs)
	return true
}

func (t *Tap) remove(c *client) {
	t.mu.Lock()
	defer t.mu.Unlock()
	cs := slices.DeleteFunc(slices.Clone(*t.clients.Load()), func(x *client) bool { return x == c })
	if len(cs) == 0 {
		t.clients.Store(nil)
		return
	}
	t.clients.Store(&cs)
}

// door is the front door's configuration of a tap listener.
func (t *Tap) door() frontdoor.Config {
	return frontdoor.Config{Name: "tap", MaxConns: t.cfg.MaxConns, Logger: t.log}
}

// Serve accepts tap clients on ln (through a front door with
// Config.MaxConns, unless it is one) until ctx ends, then closes ln, lets
// every client take what is queued for it (bounded by DrainTimeout) and
// returns once all connections of the Tap are closed. Cancel ctx only
// after the collector stopped writing, so that clients see everything.
func (t *Tap) Serve(ctx context.Context, ln net.Listener, lc ListenConfig) error {
	if _, ok := ln.(*frontdoor.Listener); !ok {
		ln = frontdoor.New(ln, t.door())
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var err error
	for {
		var conn net.Conn
		conn, err = ln.Accept() // pauses itself when out of descriptors
		if err != nil {
			break
		}
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			t.handle(ctx, conn, lc)
		}()
	}
	t.wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("tap: accepting connections: %w", err)
}

// errNoRequest: the client sent no request line.
var errNoRequest = errors.New("no request line")

// handle runs one connection: TLS, request line, authentication, then
// the client's stream.
func (t *Tap) handle(ctx context.Context, raw net.Conn, lc ListenConfig) {
	log := t.log.With("remote", raw.RemoteAddr().String(), "tap", raw.LocalAddr().String())
	// At shutdown, a handshake or request still being read ends at once.
	stop := context.AfterFunc(ctx, func() { raw.SetReadDeadline(time.Now()) })
	c, conn, reason, err := t.accept(ctx, raw, lc, log)
	stop()
	if err != nil {
		t.Counters.Rejected.Add(1)
		t.refused.WarnKey(log, err.Error(), "tap client refused", "err", err)
		if conn != nil && reason != "" {
			refuse(conn, raw, reason)
		}
		raw.Close()
		return
	}
	// A client sends nothing after its request line: a read returns when
	// it closed its side or the connection broke, which run learns from
	// ended even when no packet of the client's is being written.
	ended := make(chan error, 1)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		ended <- readUntilEnd(conn)
	}()
	c.run(ctx, log, ended)
	conn.Close()
	<-readDone
}

// readUntilEnd reads and discards what a client sends after its request
// line until the read fails, and returns that error: io.EOF when the
// client closed its side (it may still be reading), another when the
// connection broke or was closed.
func readUntilEnd(conn net.Conn) error {
	var buf [512]byte
	for {
		if _, err := conn.Read(buf[:]); err != nil {
			return err
		}
	}
}

// refuse tells the client why, on one line, and ends the stream; what
// the client sent meanwhile is read and discarded for a moment, so that
// closing does not reset the connection before it read the line.
func refuse(conn, raw net.Conn, reason string) {
	raw.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(conn, ErrorLine(reason)); err != nil {
		return
	}
	if cw, ok := conn.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		io.CopyN(io.Discard, conn, 64<<10)
	}
}

// accept shakes hands and returns the client, registered, and the
// connection to speak on; or an error and the reason to tell the client
// (on conn, if not nil).
func (t *Tap) accept(ctx context.Context, raw net.Conn, lc ListenConfig, log *slog.Logger) (c *client, conn net.Conn, reason string, err error) {
	cfg := &t.cfg
	deadline := time.Now().Add(cfg.RequestWait)
	raw.SetDeadline(deadline)
	if ctx.Err() != nil { // after the deadline: handle's AfterFunc wins
		return nil, nil, "", errors.New("shutting down")
	}
	conn = raw
	var tlsState *tls.ConnectionState
	if lc.TLS != nil {
		// A client that sends nothing (Wireshark) is a plain one.
		sc, isTLS, _ := frontdoor.Sniff(raw)
		conn = sc
		if !isTLS && !lc.Plain {
			reason := "this tap requires TLS: use pcapsync tail with TLS flags, or a loopback tap (through an SSH tunnel) for Wireshark's TCP@"
			return nil, raw, reason, errors.New("plain TCP client at a TLS tap")
		}
		if isTLS {
			raw.SetDeadline(time.Now().Add(cfg.HandshakeTimeout))
			if ctx.Err() != nil {
				return nil, nil, "", errors.New("shutting down")
			}
			tc, err := frontdoor.Handshake(ctx, sc, lc.TLS, cfg.HandshakeTimeout)
			if err != nil {
				return nil, nil, "", fmt.Errorf("TLS handshake: %w", err)
			}
			st := tc.ConnectionState()
			tlsState = &st
			conn = tc
			deadline = time.Now().Add(cfg.RequestWait)
			tc.SetDeadline(deadline)
		}
	}
	req, err := readRequest(bufio.NewReaderSize(conn, MaxRequest))
	if err != nil && !errors.Is(err, errNoRequest) {
		return nil, conn, err.Error(), err
	}
	requested := err == nil
	if want := cfg.Token; want != "" && !frontdoor.TokenEqual(req.Token, want) {
		reason := "wrong token"
		if req.Token == "" {
			reason = "token required: send a request line with token= (pcapsync tail --token-file)"
		}
		return nil, conn, reason, errors.New(reason)
	}
	sel := req.Apply(lc.Default)
	if req.Filter != "" {
		// A client's filter names no host (the operator's default may):
		// the collector would look it up inside libpcap's one-at-a-time
		// compiler, every other compile waiting on its resolver.
		if err := filter.CheckRemote(req.Filter); err != nil {
			return nil, conn, err.Error(), fmt.Errorf("filter: %w", err)
		}
	}
	f, err := filter.NewContext(ctx, sel.Filter) // the compile's wait ends with the tap
	if err != nil {
		return nil, conn, err.Error(), fmt.Errorf("filter: %w", err)
	}
	c = &client{t: t, sel: sel, filter: f, raw: raw, conn: conn, wake: make(chan struct{}, 1), ifcache: map[string][]wire.Interface{}}
	if !t.add(c) {
		reason := fmt.Sprintf("too many tap clients (%d)", cfg.MaxClients)
		return nil, conn, reason, errors.New(reason)
	}
	raw.SetDeadline(time.Time{})
	attrs := []any{"selection", sel.String(), "request", requested, "tls", tlsState != nil}
	if tlsState != nil && len(tlsState.PeerCertificates) > 0 {
		attrs = append(attrs, "cert_cn", tlsState.PeerCertificates[0].Subject.CommonName)
	}
	log.Info("tap client connected", attrs...)
	return c, conn, "", nil
}

// readRequest reads the optional request line: errNoRequest if the
// client sent nothing before the deadline or closed its side at once.
func readRequest(br *bufio.Reader) (Request, error) {
	line, err := br.ReadSlice('\n')
	switch {
	case err == nil:
	case errors.Is(err, bufio.ErrBufferFull):
		return Request{}, fmt.Errorf("%w: longer than %d bytes", ErrBadRequest, MaxRequest)
	case errors.Is(err, io.EOF) || isTimeout(err):
		if len(line) == 0 {
			return Request{}, errNoRequest
		}
		// A line ended by EOF is a line; one cut short by the deadline
		// is an error, unless it is something else altogether.
		s := string(line)
		if isTimeout(err) && (strings.HasPrefix(s, Proto) || strings.HasPrefix(Proto, s)) {
			return Request{}, fmt.Errorf("%w: no end of line in time", ErrBadRequest)
		}
	default:
		return Request{}, fmt.Errorf("reading the request line: %w", err)
	}
	return ParseRequest(string(line))
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// recHeader is a queued record's header: timestamp i64, interface u32
// (into the item's ifaces), original length u32, captured length u32.
const recHeader = 20

// itemOverhead is what an item costs beyond its records, in QueueSize.
const itemOverhead = 64

// item is one batch's selected packets, queued for a client.
type item struct {
	agent, host string
	ifaces      []wire.Interface // shared between items: never modified
	recs        []byte           // recHeader + data, per packet
	cost        int
}

// client is one tap connection. offer (any session's goroutine) and run
// (the client's own) share the queue under mu.
type client struct {
	t      *Tap
	sel    Selection
	filter *filter.Filter // run's only
	raw    net.Conn
	conn   net.Conn // TLS or raw
	wake   chan struct{}

	dropped atomic.Bool // set under mu: by offer when the queue is full

	mu      sync.Mutex
	queue   []*item
	queued  int                         // bytes charged for items queued or being written
	ifcache map[string][]wire.Interface // per agent: the last interfaces seen, cloned
}

// offer queues the packets of ev that c selected. It never blocks on
// the connection: if the queue would exceed QueueSize, c is dropped.
// (One batch is always taken, however large: the queue holds at most
// QueueSize or one batch, up to the collector's --max-frame.)
func (c *client) offer(ev *collector.BatchEvent) {
	if c.sel.Agent != "" && c.sel.Agent != ev.Agent || c.dropped.Load() {
		return
	}
	var recs []byte
	it := ev.Batch.Iter(uint32(len(ev.Ifaces)))
	var r wire.Record
	for it.Next(&r) == nil {
		if c.sel.Iface != "" && ev.Ifaces[r.IfIndex].Name != c.sel.Iface {
			continue
		}
		if recs == nil {
			recs = make([]byte, 0, len(ev.Batch.Records)+recHeader*int(ev.Batch.Count))
		}
		recs = binary.LittleEndian.AppendUint64(recs, uint64(r.Timestamp))
		recs = binary.LittleEndian.AppendUint32(recs, r.IfIndex)
		recs = binary.LittleEndian.AppendUint32(recs, r.OrigLen)
		recs = binary.LittleEndian.AppendUint32(recs, uint32(len(r.Data)))
		recs = append(recs, r.Data...)
	}
	if recs == nil {
		return
	}
	cost := len(recs) + itemOverhead
	c.mu.Lock()
	if c.dropped.Load() {
		c.mu.Unlock()
		return
	}
	if c.queued > 0 && c.queued+cost > c.t.cfg.QueueSize {
		c.dropped.Store(true)
		c.queue, c.queued = nil, 0
		c.mu.Unlock()
		c.t.Counters.DroppedSlow.Add(1)
		// Wake a write blocked on the slow client; run sees dropped.
		// (A deadline, not Close, which waits for the blocked write.)
		c.raw.SetDeadline(time.Unix(1, 0))
		c.signal()
		return
	}
	ifaces := c.ifcache[ev.Agent]
	if !slices.Equal(ifaces, ev.Ifaces) {
		ifaces = slices.Clone(ev.Ifaces)
		c.ifcache[ev.Agent] = ifaces
	}
	c.queue = append(c.queue, &item{agent: ev.Agent, host: ev.Host, ifaces: ifaces, recs: recs, cost: cost})
	c.queued += cost
	c.mu.Unlock()
	c.signal()
}

func (c *client) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// take returns the queued items (still charged until done) and whether
// c was dropped.
func (c *client) take() ([]*item, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.queue
	c.queue = nil
	return q, c.dropped.Load()
}

// done uncharges a written item.
func (c *client) done(it *item) {
	c.mu.Lock()
	if !c.dropped.Load() {
		c.queued -= it.cost
	}
	c.mu.Unlock()
}

// idbKey identifies an interface block of a client's stream.
type idbKey struct {
	agent string
	ifc   wire.Interface
}

// stream is a client's pcapng stream. The section header goes out with
// the first packet's interface block, not before: libpcap (tcpdump -r -)
// wants an interface block right after it.
type stream struct {
	bw      *bufio.Writer
	w       *pcapfile.NgWriter // nil until the first packet
	comment string             // the section header's
	idbs    map[idbKey]int
	sent    int64 // bytes flushed
}

func (s *stream) start() error {
	if s.w != nil {
		return nil
	}
	var err error
	s.w, err = pcapfile.NewNgWriter(s.bw, pcapfile.SectionInfo{OS: "Linux", UserAppl: "pcapsync collector (tap)", Comment: s.comment})
	return err
}

// packet writes one packet, and its interface's block first if new.
func (s *stream) packet(agent, host string, ifc wire.Interface, ts int64, origLen uint32, data []byte) error {
	if err := s.start(); err != nil {
		return err
	}
	key := idbKey{agent, ifc}
	idx, seen := s.idbs[key]
	if !seen {
		var err error
		if idx, err = s.w.AddInterface(store.InterfaceBlock(agent, host, ifc)); err != nil {
			return err
		}
		s.idbs[key] = idx
	}
	return s.w.WritePacket(idx, ts, origLen, data)
}

// probe adds to the stream what a reader takes without a change: the
// section header if it has not started, else an empty Name Resolution
// Block (pcapfile.NgWriter.WriteEmptyNameResolution). A client that is
// gone answers the bytes with a reset, and the next write fails.
func (s *stream) probe() error {
	if s.w == nil {
		return s.start()
	}
	return s.w.WriteEmptyNameResolution()
}

// flush sends what is buffered and returns how many bytes that was.
func (s *stream) flush() (int64, error) {
	if s.w == nil {
		return 0, nil
	}
	err := s.bw.Flush()
	n := s.w.Written() - int64(s.bw.Buffered()) - s.sent
	s.sent += n
	return n, err
}

// errDropped: offer dropped the client.
var errDropped = errors.New("dropped as too slow")

// progressWriter writes to a client with a deadline renewed before
// every write (of up to the stream's 64 KiB buffer): a client that takes
// nothing for timeout is cut off, a slow one that keeps taking is not.
// At shutdown, by bounds the whole drain instead.
type progressWriter struct {
	c       *client
	timeout time.Duration
	by      time.Time
}

func (pw *progressWriter) Write(p []byte) (int, error) {
	d := pw.by
	if d.IsZero() {
		d = time.Now().Add(pw.timeout)
	}
	pw.c.raw.SetWriteDeadline(d)
	if pw.c.dropped.Load() { // after the deadline: offer's past one wins
		return 0, errDropped
	}
	return pw.c.conn.Write(p)
}

// run writes c's stream until the client is dropped, goes away, or ctx
// ends (then what is queued is written first, bounded by DrainTimeout,
// and a stream without packets gets its section header, so that it is
// valid). ended gets the error that ended the reads of the client's
// side: a broken connection ends the stream; the end of what the client
// sends (io.EOF) starts the probes of whether it still reads
// (Config.ProbeInterval).
func (c *client) run(ctx context.Context, log *slog.Logger, ended <-chan error) {
	t := c.t
	t.Counters.Connected.Add(1)
	t.Counters.Clients.Add(1)
	defer func() {
		t.remove(c)
		t.Counters.Connected.Add(-1)
	}()
	pw := &progressWriter{c: c, timeout: t.cfg.WriteTimeout}
	s := &stream{bw: bufio.NewWriterSize(pw, 64<<10), comment: "pcapsync tap: " + c.sel.String(), idbs: map[idbKey]int{}}
	var packets uint64
	err := c.loop(ctx, s, pw, ended, &packets, log)
	attrs := []any{"packets", packets, "bytes", s.sent}
	switch {
	case c.dropped.Load() || errors.Is(err, errDropped):
		log.Warn("tap client too slow: dropped (its queue was full)", append(attrs, "queue_size", t.cfg.QueueSize)...)
		c.raw.Close()
	case err != nil && isTimeout(err) && ctx.Err() == nil:
		t.Counters.DroppedSlow.Add(1)
		log.Warn("tap client too slow: dropped (took nothing for the write timeout)", append(attrs, "write_timeout", t.cfg.WriteTimeout)...)
		c.raw.Close()
	case err != nil:
		log.Info("tap client disconnected", append(attrs, "err", err)...)
	default:
		log.Info("tap client disconnected", attrs...)
	}
}

// errGone: the client's side of the connection broke.
var errGone = errors.New("the client went away")

// loop is run's body: it writes what is queued as it comes, and probes
// a client that closed its side while nothing is sent to it.
func (c *client) loop(ctx context.Context, s *stream, pw *progressWriter, ended <-chan error, packets *uint64, log *slog.Logger) error {
	t := c.t
	flush := func() error {
		n, err := s.flush()
		t.Counters.Bytes.Add(uint64(n))
		return err
	}
	var probe <-chan time.Time // ticks once the client closed its side
	var sent int64             // s.sent at the last probe or tick
	sendProbe := func() error {
		if err := s.probe(); err != nil {
			return err
		}
		if err := flush(); err != nil {
			return fmt.Errorf("%w: %w", errGone, err)
		}
		sent = s.sent
		return nil
	}
	for {
		stopping := false
		select {
		case <-c.wake:
		case <-ctx.Done():
			stopping = true
		case err := <-ended:
			ended = nil
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				return fmt.Errorf("%w: %w", errGone, err)
			}
			tick := time.NewTicker(t.cfg.ProbeInterval)
			defer tick.Stop()
			probe = tick.C
			if err := sendProbe(); err != nil {
				return err
			}
			continue
		case <-probe:
			if s.sent == sent { // nothing sent since the last tick
				if err := sendProbe(); err != nil {
					return err
				}
			}
			sent = s.sent
			continue
		}
		q, dropped := c.take()
		if dropped {
			return nil
		}
		if stopping {
			pw.by = time.Now().Add(t.cfg.DrainTimeout)
		}
		for _, it := range q {
			n, err := c.writeItem(s, it, log)
			*packets += n
			t.Counters.Packets.Add(n)
			c.done(it)
			if err != nil {
				return err
			}
		}
		if stopping {
			if err := s.start(); err != nil {
				return err
			}
		}
		if err := flush(); err != nil || stopping {
			return err
		}
	}
}

// writeItem writes the packets of it that pass the filter and returns
// how many it wrote.
func (c *client) writeItem(s *stream, it *item, log *slog.Logger) (uint64, error) {
	var n uint64
	b := it.recs
	for len(b) >= recHeader {
		ts := int64(binary.LittleEndian.Uint64(b))
		ifx := binary.LittleEndian.Uint32(b[8:])
		orig := binary.LittleEndian.Uint32(b[12:])
		capLen := binary.LittleEndian.Uint32(b[16:])
		data := b[recHeader : recHeader+capLen]
		b = b[recHeader+capLen:]
		ifc := it.ifaces[ifx]
		ok, ferr := c.filter.Match(ifc.LinkType, data, orig)
		if ferr != nil {
			log.Warn("tap filter does not apply to this link type: its packets are not sent", "agent", it.agent, "iface", ifc.Name, "linktype", ifc.LinkType, "err", ferr)
		}
		if !ok {
			continue
		}
		if err := s.packet(it.agent, it.host, ifc, ts, orig, data); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
