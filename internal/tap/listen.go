package tap

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/pcapsync/pcapsync/internal/fielderr"

	"github.com/pcapsync/pcapsync/internal/frontdoor"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// Listener is one listener of Config.Listen: an address and the
// selection of the clients that send no request line (Wireshark's
// TCP@).
type Listener struct {
	Addr    string // HOST:PORT
	Default Selection
}

// ParseListener reads HOST:PORT[=AGENT[:IFACE]] (the collector's
// --tap): AGENT "*" is every agent, as is none.
func ParseListener(s string) (Listener, error) {
	addr, sel, _ := strings.Cut(s, "=")
	l := Listener{Addr: addr}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return l, fmt.Errorf("%q: want HOST:PORT[=AGENT[:IFACE]]: %w", s, err)
	}
	if sel == "" {
		return l, nil
	}
	l.Default.Agent, l.Default.Iface, _ = strings.Cut(sel, ":")
	if l.Default.Agent == AllAgents {
		l.Default.Agent = ""
	} else if err := wire.ValidateName(l.Default.Agent); err != nil {
		return l, fmt.Errorf("%q: agent: %w", s, err)
	}
	return l, nil
}

// String returns l as ParseListener reads it.
func (l Listener) String() string {
	if l.Default == (Selection{}) {
		return l.Addr
	}
	a := cmp.Or(l.Default.Agent, AllAgents)
	if l.Default.Iface != "" {
		a += ":" + l.Default.Iface
	}
	return l.Addr + "=" + a
}

// Validate reports the first unusable setting, naming its field
// (fielderr).
func (c *Config) Validate() error {
	switch {
	case c.QueueSize != 0 && (c.QueueSize < MinQueueSize || c.QueueSize > MaxQueueSize):
		return fielderr.Errorf("tap: queue size %d out of range 64KiB..1GiB ({tap.QueueSize})", c.QueueSize)
	case c.MaxClients < 0:
		return fmt.Errorf("tap: max clients %d is negative", c.MaxClients)
	case c.MaxConns < 0:
		return fielderr.Errorf("tap: max conns %d is negative ({tap.MaxConns})", c.MaxConns)
	case c.RequestWait < 0 || c.HandshakeTimeout < 0 || c.WriteTimeout < 0 || c.DrainTimeout < 0:
		return errors.New("tap: durations must not be negative")
	case len(c.Token) > wire.MaxTokenLen:
		return fmt.Errorf("tap: token of %d bytes, at most %d", len(c.Token), wire.MaxTokenLen)
	}
	for _, l := range c.Listen {
		if _, _, err := net.SplitHostPort(l.Addr); err != nil {
			return fielderr.Errorf("tap: listener %q: want HOST:PORT ({tap.Listen}): %w", l.Addr, err)
		}
		if l.Default.Agent != "" {
			if err := wire.ValidateName(l.Default.Agent); err != nil {
				return fielderr.Errorf("tap: listener %s: agent: %w ({tap.Listen})", l, err)
			}
		}
	}
	return nil
}

// Doors returns the front doors of the listeners New opened: their
// connection counters.
func (t *Tap) Doors() []*frontdoor.Listener { return t.lns }

// listenConfig is how ln serves (see Config.TLS), with the warnings
// its setting deserves.
func (t *Tap) listenConfig(ln net.Listener, def Selection) ListenConfig {
	lc := ListenConfig{Default: def, TLS: t.cfg.TLS}
	addr := ln.Addr().String()
	tcp, _ := ln.Addr().(*net.TCPAddr)
	switch {
	case t.cfg.TLS == nil:
		t.log.Warn("INSECURE: tap in plain TCP: anyone who reaches it sees the packets", "tap", addr)
	case tcp != nil && tcp.IP.IsLoopback():
		lc.Plain = true
		if t.cfg.TLS.ClientAuth != tls.NoClientCert && t.cfg.Token == "" {
			t.log.Warn("tap on loopback: plain TCP clients on this host need no client certificate; add --token-file to require one there", "tap", addr)
		}
	}
	if t.cfg.Token != "" && def != (Selection{}) {
		t.log.Warn("tap: with --token-file every client must send the token in a request line, so the default selection serves no one (Wireshark's TCP@ sends nothing: use pcapsync tail --token-file ... | wireshark -k -i -)", "tap", addr)
	}
	return lc
}

// Addrs returns the addresses of the listeners New opened.
func (t *Tap) Addrs() []string {
	var a []string
	for _, ln := range t.lns {
		a = append(a, ln.Addr().String())
	}
	return a
}

// Run serves every listener New opened until ctx ends (see Serve: the
// clients get what is queued for them first) and returns once all are
// closed. Cancel ctx only after the collector wrote its last batch.
func (t *Tap) Run(ctx context.Context) error {
	done := make(chan error, len(t.lns))
	for i, ln := range t.lns {
		go func() { done <- t.Serve(ctx, ln, t.lcs[i]) }()
	}
	var errs []error
	for range t.lns {
		errs = append(errs, <-done)
	}
	return errors.Join(errs...)
}

// Close closes the listeners of a Tap that Run never served (after an
// error at start).
func (t *Tap) Close() error {
	var errs []error
	for _, ln := range t.lns {
		errs = append(errs, ln.Close())
	}
	return errors.Join(errs...)
}
