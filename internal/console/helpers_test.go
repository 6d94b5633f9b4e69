package console

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/flow"
	"github.com/pcapsync/pcapsync/internal/metrics"
	"github.com/pcapsync/pcapsync/internal/queryhttp"
	"github.com/pcapsync/pcapsync/internal/testutil/flowtest"
)

const testToken = "s3cret-token-of-the-test"

// fixture is a console over a generated root of two agents (a, b, with
// flow files) behind a real front door on loopback, its status naming
// a (connected) and c (connected, nothing written yet).
type fixture struct {
	dir, base string
}

func newFixture(t *testing.T) *fixture { return newFixtureTLS(t, nil) }

// newFixtureTLS is newFixture's console with the front door's TLS tc.
func newFixtureTLS(t *testing.T, tc *tls.Config) *fixture {
	t.Helper()
	fx := &fixture{dir: t.TempDir()}
	convs := flowtest.GenConvs(7, 12)
	ps := flowtest.GenPackets(convs)
	flowtest.WriteRoot(t, fx.dir, ps, []flowtest.Agent{
		{Name: "a", Iface: "a:eth0", PerFile: 60},
		{Name: "b", Iface: "b:eth1", PerFile: 40, Keep: func(c int) bool { return c%2 == 0 }},
	}, &flow.Config{})
	now := time.Now().UTC()
	st := metrics.Status{Time: now, Agents: []metrics.AgentStatus{
		{Name: "a", Host: "host-a", Version: "1.4.0 (test)", Connected: true, Since: now.Add(-time.Minute), PacketsPerSecond: 12.5, KernelDrops: 3,
			Interfaces: []metrics.InterfaceStatus{{Name: "eth0", LinkType: 1, Reported: true, KernelDrops: 3}, {Name: "eth9", LinkType: 1}}},
		{Name: "c", Host: "host-c", Connected: true, Since: now.Add(-time.Second)},
	}}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h, err := New(Config{Dir: fx.dir, Token: testToken, Status: func() any { return st }, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := queryhttp.New(queryhttp.Config{Listen: "127.0.0.1:0", Dir: fx.dir, TLS: tc, Handler: h, Name: "console", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("console listener: %v", err)
		}
	})
	fx.base = "http://" + srv.Addr()
	if tc != nil {
		fx.base = "https://" + srv.Addr()
	}
	return fx
}

// noRedirect is a plain HTTP client that shows redirects as they come.
var noRedirect = &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// login posts the token and returns the session cookie's header.
func (fx *fixture) login(t *testing.T, token string) *http.Response {
	t.Helper()
	resp, err := noRedirect.Post(fx.base+"/login", "application/x-www-form-urlencoded", strings.NewReader(url.Values{"token": {token}}.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// get fetches path with the cookies given and returns the answer, its
// body read.
func (fx *fixture) get(t *testing.T, path string, cookies ...*http.Cookie) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, fx.base+path, nil)
	for _, c := range cookies {
		req.AddCookie(c)
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, bytes.Clone(b)
}
