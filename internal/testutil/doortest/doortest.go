// Package doortest is the one front door test suite: given an Adapter
// for a listener (the collector's agent port, the tap, the query
// listener, the metrics listener), Run checks the behaviours every
// listener shares through internal/frontdoor on real loopback sockets:
// TLS or plain, client certificates, the token, the connection caps, the
// handshake timeout, and that good clients are served throughout.
// For tests only.
package doortest

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/pki"
	"github.com/pcapsync/pcapsync/internal/pki/pkitest"
	"github.com/pcapsync/pcapsync/internal/testutil"
)

// Token is the token a listener is started with when Options.Token is
// set; a client that is to be refused sends another of the same length.
const Token = "0123456789abcdef0123456789abcdef"

// Name is the client certificate's name (CN and DNS name): the
// collector checks it against the agent's name.
const Name = "door"

// Cap is the listener's connection cap, PerSource the cap of one
// address (the frontdoor default for Cap: a quarter of it).
const (
	Cap       = 16
	PerSource = Cap / 4
)

// Options is how the suite wants a listener started.
type Options struct {
	// Addr is the HOST:PORT to listen on ("127.0.0.1:0", or
	// "0.0.0.0:0" where loopback would admit plain clients beside TLS).
	Addr string
	// TLS, if set, is the server configuration (client certificates
	// required if its ClientAuth says so); nil: plain.
	TLS *tls.Config
	// Token, if set, must come from every client.
	Token string
	// MaxConns and MaxPerSource are the caps (Cap, PerSource).
	MaxConns, MaxPerSource int
	// HandshakeTimeout bounds a client's handshake (TLS and the
	// protocol's first message); the suite sets it short where it
	// waits for it, long elsewhere.
	HandshakeTimeout time.Duration
}

// Door is a listener Adapter.Start started.
type Door struct {
	// Addr is its address, dialable on 127.0.0.1.
	Addr string
	// Open counts its connections open now (frontdoor.Counters.Open).
	Open func() int64
	// Over counts the connections it closed over a cap, the listener's
	// own counter if it has one (the collector's), else the front
	// door's OverLimit + OverSource.
	Over func() uint64
}

// Adapter makes one listener testable by the suite.
type Adapter struct {
	// Start starts the listener until the test ends.
	Start func(t *testing.T, o Options) Door
	// Speak does the listener's handshake on c (over TLS if tc is set),
	// sending token if not "", and returns nil if the client was
	// accepted (served), an error saying why not otherwise.
	Speak func(t *testing.T, c net.Conn, tc *tls.Config, token string) error

	// The behaviours the listener lacks, each with the reason ("" if it
	// has it): the suite skips their cases saying so.
	NoTLS, NoToken, NoHandshakeTimeout string
	// FixedHandshakeTimeout, if set, is the listener's handshake
	// timeout where Options.HandshakeTimeout cannot set it: the suite
	// waits that long (and a margin) for a silent client to be closed.
	FixedHandshakeTimeout time.Duration
	// NoPlainHandshakeTimeout: a silent plain client is not closed (the
	// tap serves it its listener's default selection).
	NoPlainHandshakeTimeout string
}

// Run runs the suite on a.
func Run(t *testing.T, a Adapter) {
	p := pkitest.New(t)
	cert, key := p.Issue(t, p.CA, Name, pki.Leaf{CommonName: Name, DNSNames: []string{Name}, Client: true})
	withCert, noCert := p.RawClient(t, cert, key), p.RawClient(t, "", "")
	long := time.Minute
	base := Options{Addr: "127.0.0.1:0", MaxConns: Cap, MaxPerSource: PerSource, HandshakeTimeout: long}
	skip := func(t *testing.T, reason string) {
		if reason != "" {
			t.Skip(reason)
		}
	}

	t.Run("plain client to a TLS-only listener refused", func(t *testing.T) {
		skip(t, a.NoTLS)
		o := base
		o.Addr, o.TLS = "0.0.0.0:0", p.Server(t, false) // loopback listeners may admit plain clients
		addr := a.Start(t, o).Addr
		refused(t, a, addr, nil, "")
		accepted(t, a, addr, noCert, "")
	})
	t.Run("TLS client to a plain listener refused", func(t *testing.T) {
		addr := a.Start(t, base).Addr
		refused(t, a, addr, noCert, "")
		accepted(t, a, addr, nil, "")
	})
	t.Run("no client certificate refused where required", func(t *testing.T) {
		skip(t, a.NoTLS)
		o := base
		o.TLS = p.Server(t, true)
		addr := a.Start(t, o).Addr
		refused(t, a, addr, noCert, "")
		accepted(t, a, addr, withCert, "")
	})
	t.Run("wrong or missing token refused, right one accepted", func(t *testing.T) {
		skip(t, a.NoToken)
		o := base
		o.Token = Token
		addr := a.Start(t, o).Addr
		for _, bad := range []string{"", "x" + Token[1:], Token[:16], Token + "0"} {
			refused(t, a, addr, nil, bad)
		}
		accepted(t, a, addr, nil, Token)
	})
	t.Run("connections over the caps closed at once", func(t *testing.T) {
		d := a.Start(t, base)
		addr, open := d.Addr, d.Open
		var held []net.Conn
		t.Cleanup(func() {
			for _, c := range held {
				c.Close()
			}
		})
		hold := func(src string, n int) {
			for range n {
				c := testutil.DialFrom(t, src, addr)
				if c == nil {
					t.Fatalf("a connection from %s under the cap was reset", src)
				}
				held = append(held, c)
			}
		}
		hold("127.0.0.1", PerSource)
		waitOpen(t, open, PerSource)
		closedAtOnce(t, addr, "127.0.0.1", "over the source's cap")
		accepted(t, a, addr, nil, "", "127.0.0.2") // another address is served
		waitOpen(t, open, PerSource)               // and gone
		for _, src := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"} {
			hold(src, PerSource)
		}
		waitOpen(t, open, Cap)
		closedAtOnce(t, addr, "127.0.0.5", "over the listener's cap")
		testutil.EventuallyTrue(t, 5*time.Second, "2 connections counted over the caps", func() bool { return d.Over() == 2 })
		held[0].Close()
		waitOpen(t, open, Cap-1)
		accepted(t, a, addr, nil, "", "127.0.0.5")
		// The held ones still work: each one under the cap is served.
		c := held[len(held)-1]
		if err := a.Speak(t, c, nil, ""); err != nil {
			t.Errorf("a connection held under the cap: %v", err)
		}
	})
	t.Run("silent client closed after the handshake timeout", func(t *testing.T) {
		skip(t, a.NoHandshakeTimeout)
		for _, tt := range []struct {
			name string
			tls  *tls.Config
		}{{"plain", nil}, {"TLS", p.Server(t, false)}} {
			t.Run(tt.name, func(t *testing.T) {
				if tt.tls != nil {
					skip(t, a.NoTLS)
				} else {
					skip(t, a.NoPlainHandshakeTimeout)
				}
				o := base
				o.TLS, o.HandshakeTimeout = tt.tls, 100*time.Millisecond
				if tt.tls != nil {
					o.Addr = "0.0.0.0:0" // TLS only: a loopback listener's plain side may have other rules
				}
				addr := a.Start(t, o).Addr
				c := testutil.DialFrom(t, "127.0.0.1", addr)
				if c == nil {
					t.Fatal("reset at once")
				}
				defer c.Close()
				waitClosed(t, c, "the silent client", max(a.FixedHandshakeTimeout, o.HandshakeTimeout))
				accepted(t, a, addr, clientFor(tt.tls, noCert), "")
			})
		}
	})
}

// clientFor is the client configuration for a listener configured with
// server: none for a plain one.
func clientFor(server, client *tls.Config) *tls.Config {
	if server == nil {
		return nil
	}
	return client
}

// dial connects from src (127.0.0.1 if none) to addr.
func dial(t *testing.T, addr string, src ...string) net.Conn {
	t.Helper()
	from := "127.0.0.1"
	if len(src) > 0 {
		from = src[0]
	}
	c := testutil.DialFrom(t, from, addr)
	if c == nil {
		t.Fatalf("dialing %s from %s: reset", addr, from)
	}
	return c
}

func accepted(t *testing.T, a Adapter, addr string, tc *tls.Config, token string, src ...string) {
	t.Helper()
	c := dial(t, addr, src...)
	defer c.Close()
	if err := a.Speak(t, c, tc, token); err != nil {
		t.Errorf("a good client (TLS %v, token %v): refused: %v", tc != nil, token != "", err)
	}
}

func refused(t *testing.T, a Adapter, addr string, tc *tls.Config, token string) {
	t.Helper()
	c := dial(t, addr)
	defer c.Close()
	if err := a.Speak(t, c, tc, token); err == nil {
		t.Errorf("a bad client (TLS %v, token %q) was accepted", tc != nil, redact(token))
	} else {
		t.Logf("refused: %v", err)
	}
}

func redact(token string) string {
	if token == Token {
		return "right"
	}
	if token == "" {
		return ""
	}
	return "wrong"
}

func waitOpen(t *testing.T, open func() int64, n int64) {
	t.Helper()
	testutil.EventuallyTrue(t, 5*time.Second, "connections open", func() bool { return open() == n })
}

// closedAtOnce dials addr from src and checks that the connection is
// closed without a word (before any handshake) within a bound.
func closedAtOnce(t *testing.T, addr, src, what string) {
	t.Helper()
	c := testutil.DialFrom(t, src, addr)
	if c == nil { // the reset beat the dial's return
		return
	}
	defer c.Close()
	waitClosed(t, c, "a connection "+what, 0)
}

// waitClosed waits for the listener to close c, for at most timeout
// and a margin of 5 seconds.
func waitClosed(t *testing.T, c net.Conn, what string, timeout time.Duration) {
	t.Helper()
	bound := timeout + 5*time.Second
	c.SetReadDeadline(time.Now().Add(bound))
	var err error
	for err == nil {
		_, err = c.Read(make([]byte, 512)) // a TLS alert or an error line may come first
	}
	if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s is still open after %s", what, bound)
	}
}

// SpeakHTTP is an Adapter.Speak for an HTTP listener: it sends a GET of
// path (with the header "Authorization: auth" if auth is not "") on c,
// over TLS if tc is set, and returns nil for a 200.
func SpeakHTTP(c net.Conn, tc *tls.Config, path, auth string) error {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if tc != nil {
		c = tls.Client(c, tc)
	}
	req := "GET " + path + " HTTP/1.1\r\nHost: pcapsync\r\n"
	if auth != "" {
		req += "Authorization: " + auth + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s", resp.Status)
	}
	return nil
}
