package frontdoor

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Defaults for the zero fields of Config.
const (
	DefaultMaxConns    = 1024
	DefaultLogInterval = time.Second
)

// Accept's pause after a failure for lack of descriptors or memory: it
// starts at minPause and doubles up to maxPause while accepts keep
// failing.
const (
	minPause = 5 * time.Millisecond
	maxPause = time.Second
)

// Config configures a Listener. The zero value means the defaults.
type Config struct {
	// Name names the listener in its log lines ("agents", "tap",
	// "query", "metrics").
	Name string
	// MaxConns bounds the connections open at once, handshakes
	// included; one more is accepted and closed at once
	// (Counters.OverLimit). 0 means DefaultMaxConns.
	MaxConns int
	// MaxPerSource bounds the connections of one source address open at
	// once (Counters.OverSource). 0 means a quarter of MaxConns, but at
	// least 4 (or MaxConns, if lower).
	MaxPerSource int
	// LogInterval is the least time between two log lines of one kind
	// of refusal (see RateLog). 0 means DefaultLogInterval.
	LogInterval time.Duration
	// Logger receives the refusals. nil means slog.Default().
	Logger *slog.Logger
	// OnOver, if set, is called for each connection closed over a cap,
	// besides the Counters (a caller's own counter).
	OnOver func()
}

// Validate reports the first unusable setting.
func (c *Config) Validate() error {
	switch {
	case c.MaxConns < 0:
		return fmt.Errorf("%w: %s: max conns %d is negative", ErrConfig, c.Name, c.MaxConns)
	case c.MaxPerSource < 0:
		return fmt.Errorf("%w: %s: max conns per source %d is negative", ErrConfig, c.Name, c.MaxPerSource)
	case c.LogInterval < 0:
		return fmt.Errorf("%w: %s: log interval %s is negative", ErrConfig, c.Name, c.LogInterval)
	}
	return nil
}

// WithDefaults returns c with its zero fields set to the defaults.
func (c Config) WithDefaults() Config {
	if c.MaxConns == 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.MaxPerSource == 0 {
		c.MaxPerSource = max(c.MaxConns/4, min(c.MaxConns, 4))
	}
	if c.LogInterval == 0 {
		c.LogInterval = DefaultLogInterval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Counters count a Listener's connections. Safe for concurrent use.
type Counters struct {
	Open         atomic.Int64  // connections open now
	Accepted     atomic.Uint64 // connections handed on, in total
	OverLimit    atomic.Uint64 // closed at once: MaxConns were open
	OverSource   atomic.Uint64 // closed at once: MaxPerSource of its address were open
	AcceptErrors atomic.Uint64 // accepts failed for lack of descriptors or memory (each followed by a pause)
}

// Listener is a net.Listener that enforces Config's caps. Its Accept
// returns *Conn, whose Close gives the connection's place back.
type Listener struct {
	Counters Counters

	ln   net.Listener
	cfg  Config
	log  *slog.Logger
	done chan struct{}
	once sync.Once

	overLog, errLog RateLog

	mu   sync.Mutex
	open int
	src  map[netip.Addr]int
}

// Listen validates cfg and listens on the TCP address addr, on the
// stack its host names (ListenNetwork).
func Listen(addr string, cfg Config) (*Listener, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ln, err := ListenTCP(addr)
	if err != nil {
		return nil, err
	}
	return New(ln, cfg), nil
}

// New returns a Listener accepting on ln, which it owns from now on.
// cfg must be valid (Config.Validate).
func New(ln net.Listener, cfg Config) *Listener {
	cfg = cfg.WithDefaults()
	l := &Listener{ln: ln, cfg: cfg, log: cfg.Logger, done: make(chan struct{}), src: map[netip.Addr]int{}}
	l.overLog.Interval, l.errLog.Interval = cfg.LogInterval, cfg.LogInterval
	return l
}

// Config returns the configuration in force, defaults applied.
func (l *Listener) Config() Config { return l.cfg }

// Accept returns the next connection within the caps. A connection over
// a cap is closed (with a reset) and counted, and Accept goes on; an
// accept that fails for lack of descriptors or memory, or with another
// temporary error, is counted and retried after a pause. Any other
// error, net.ErrClosed after Close included, is returned.
func (l *Listener) Accept() (net.Conn, error) {
	pause := minPause
	for {
		c, err := l.ln.Accept()
		if err != nil {
			var te interface{ Temporary() bool }
			if !IsResourceError(err) && !(errors.As(err, &te) && te.Temporary() && !errors.Is(err, net.ErrClosed)) {
				return nil, err
			}
			l.Counters.AcceptErrors.Add(1)
			l.errLog.Warn(l.log, "accepting a connection failed, pausing", "listener", l.cfg.Name, "err", err, "pause", pause)
			select {
			case <-time.After(pause):
			case <-l.done:
				return nil, net.ErrClosed
			}
			pause = min(2*pause, maxPause)
			continue
		}
		pause = minPause
		if fc := l.admit(c); fc != nil {
			return fc, nil
		}
	}
}

// admit returns c as a *Conn within the caps, or closes it and returns
// nil.
func (l *Listener) admit(c net.Conn) net.Conn {
	src := sourceOf(c.RemoteAddr())
	l.mu.Lock()
	over := ""
	switch {
	case l.open >= l.cfg.MaxConns:
		over = "max_conns"
	case l.src[src] >= l.cfg.MaxPerSource:
		over = "max_conns_per_source"
	default:
		l.open++
		l.src[src]++
	}
	l.mu.Unlock()
	if over == "" {
		l.Counters.Open.Add(1)
		l.Counters.Accepted.Add(1)
		return &Conn{Conn: c, l: l, src: src}
	}
	if l.cfg.OnOver != nil {
		l.cfg.OnOver()
	}
	limit := l.cfg.MaxConns
	if over == "max_conns" {
		l.Counters.OverLimit.Add(1)
	} else {
		l.Counters.OverSource.Add(1)
		limit = l.cfg.MaxPerSource
	}
	l.overLog.Warn(l.log, "connection limit reached, closing new connections at once", "listener", l.cfg.Name,
		"limit", over, over, limit, "remote", c.RemoteAddr().String())
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0) // a reset: no TIME_WAIT, nothing kept
	}
	c.Close()
	return nil
}

// release gives back a connection's place.
func (l *Listener) release(src netip.Addr) {
	l.mu.Lock()
	l.open--
	if n := l.src[src] - 1; n > 0 {
		l.src[src] = n
	} else {
		delete(l.src, src)
	}
	l.mu.Unlock()
	l.Counters.Open.Add(-1)
}

// Close closes the listener; connections already accepted stay open.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.ln.Close()
}

// Addr returns the listener's address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Conn is a connection of a Listener: closing it gives its place back
// (once, however often it is closed).
type Conn struct {
	net.Conn
	l    *Listener
	src  netip.Addr
	once sync.Once
}

// Close closes the connection and gives its place back.
func (c *Conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.src) })
	return err
}

// CloseWrite shuts down the writing side, if the connection below has
// one (TCP does), so that a refusal can be read before the close.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// NetConn returns the connection Accept took, as tls.Conn's does.
func (c *Conn) NetConn() net.Conn { return c.Conn }

// TCPConn returns the TCP connection below c (a *Conn, a *tls.Conn
// over one, or the *net.TCPConn itself), for socket options.
func TCPConn(c net.Conn) (*net.TCPConn, bool) {
	for {
		switch x := c.(type) {
		case *net.TCPConn:
			return x, true
		case interface{ NetConn() net.Conn }:
			c = x.NetConn()
		default:
			return nil, false
		}
	}
}

// sourceOf returns the address a connection counts against in
// MaxPerSource: its IP (an IPv4-mapped IPv6 one as IPv4).
func sourceOf(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap().WithZone("")
	}
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap.Addr().Unmap().WithZone("")
	}
	return netip.Addr{}
}

// IsResourceError reports an accept or read error that passes when
// connections end: out of file descriptors, buffers or memory.
func IsResourceError(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}
