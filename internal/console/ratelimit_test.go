package console

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLoginRateLimit: past LoginBurst wrong tokens from one address,
// POST /login is answered 429 with Retry-After, the right token too,
// while another address still logs in; over the real front door.
func TestLoginRateLimit(t *testing.T) {
	fx := newFixture(t)
	for i := range LoginBurst {
		if resp := fx.login(t, "wrong"); resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("wrong token %d: %s, want 303 back to the form", i+1, resp.Status)
		}
	}
	for _, tok := range []string{"wrong", testToken} {
		resp := fx.login(t, tok)
		ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		if resp.StatusCode != http.StatusTooManyRequests || err != nil || ra < 1 || ra > int(LoginRefill/time.Second) {
			t.Fatalf("login past the burst: %s, Retry-After %q; want 429 and 1..%d s", resp.Status, resp.Header.Get("Retry-After"), int(LoginRefill/time.Second))
		}
		if len(resp.Cookies()) > 0 {
			t.Fatalf("a refused login set a cookie")
		}
	}
	// Another source address (127.0.0.2) is not held back.
	addr := strings.TrimPrefix(fx.base, "http://")
	tr := &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
		return d.DialContext(ctx, network, addr)
	}}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second, CheckRedirect: noRedirect.CheckRedirect}
	resp, err := c.PostForm(fx.base+"/login", url.Values{"token": {testToken}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) == 0 {
		t.Fatalf("login from another address: %s, cookies %v; want 303 and a session", resp.Status, resp.Cookies())
	}
}

// TestLoginLimiter: a bucket comes back with time, and the table holds
// at most its bound of addresses, those past it sharing one bucket.
func TestLoginLimiter(t *testing.T) {
	now := time.Unix(1e9, 0)
	l := newLoginLimiter()
	l.now = func() time.Time { return now }
	l.max = 8
	for range LoginBurst {
		l.failed("10.0.0.1")
	}
	if d := l.wait("10.0.0.1"); d != LoginRefill {
		t.Fatalf("wait after the burst %s, want %s", d, LoginRefill)
	}
	now = now.Add(LoginRefill / 2)
	if d := l.wait("10.0.0.1"); d != LoginRefill/2 {
		t.Fatalf("wait half a refill later %s, want %s", d, LoginRefill/2)
	}
	now = now.Add(LoginRefill / 2)
	if d := l.wait("10.0.0.1"); d != 0 {
		t.Fatalf("wait a refill later %s, want 0", d)
	}
	for i := range 1000 {
		src := fmt.Sprintf("10.1.%d.%d", i/256, i%256)
		l.failed(src)
		if n := l.held(); n > l.max {
			t.Fatalf("%d addresses held, at most %d", n, l.max)
		}
	}
	// The addresses past the bound share the overflow bucket: spent.
	if d := l.wait("192.0.2.1"); d == 0 {
		t.Fatalf("an address past the table's bound has its own bucket: the overflow should be spent")
	}
	// Once the held buckets are full again, new addresses get their own.
	now = now.Add(LoginBurst * LoginRefill)
	if d := l.wait("192.0.2.1"); d != 0 {
		t.Fatalf("wait of a new address after the refill %s, want 0", d)
	}
}
