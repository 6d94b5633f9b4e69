package queryhttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/query"
	"github.com/pcapsync/pcapsync/internal/testutil"
)

const token = "query-test-token-0123456789"

// TestRemoteMatchesLocal: what Fetch writes is byte for byte what
// query.Run writes here for the same selection, and the Result is the
// same, over TLS with a client certificate and the token.
func TestRemoteMatchesLocal(t *testing.T) {
	dir := writeFixture(t, 600, "a1", "a2")
	certs := pkiDir(t)
	s := startServer(t, Config{Listen: "127.0.0.1:0", Dir: dir, TLS: serverTLS(t, certs), Token: token})
	epoch := func(ms int64) string { ns := base + ms*1e6; return fmt.Sprintf("%d.%09d", ns/1e9, ns%1e9) }
	for _, tc := range []struct {
		name string
		p    Params
	}{
		{"everything", Params{}},
		{"one agent", Params{Agents: []string{"a2"}}},
		{"glob and interface", Params{Agents: []string{"a*"}, Ifaces: []string{"*:eth1"}}},
		{"range", Params{Since: epoch(100), Until: epoch(250)}},
		{"filter", Params{Filter: "udp and ip[5] & 1 = 1", Since: epoch(10)}},
		{"count", Params{Count: 77}},
		{"max bytes", Params{MaxBytes: 20000}},
		{"empty", Params{Since: epoch(5000)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parseQuery(tc.p.Values(), dir, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			want := localQuery(t, cfg)
			var wantRes query.Result
			wantRes, _ = query.Run(context.Background(), cfg, io.Discard)
			var got bytes.Buffer
			res, err := Fetch(context.Background(), ClientConfig{Addr: s.Addr(), TLS: clientTLS(t, certs, certs, "viewer"),
				Token: token, Params: tc.p}, &got)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes(), want) {
				t.Errorf("remote output (%d bytes) differs from the local one (%d bytes)", got.Len(), len(want))
			}
			if !reflect.DeepEqual(res, wantRes) {
				t.Errorf("remote result %+v, local %+v", res, wantRes)
			}
		})
	}
	if n := s.Counters.OK.Load(); n != 8 {
		t.Errorf("ok counter %d, want 8", n)
	}
}

// TestRefusals: every way to be refused, with its status, its reason
// and its counter, on a listener that is not loopback (0.0.0.0, reached
// through 127.0.0.1); plain HTTP with the token on a loopback one.
func TestRefusals(t *testing.T) {
	dir := writeFixture(t, 50, "a1")
	certs, other := pkiDir(t), pkiDir(t)
	s := startServer(t, Config{Listen: "0.0.0.0:0", Dir: dir, TLS: serverTLS(t, certs), Token: token})
	_, port, _ := net.SplitHostPort(s.Addr())
	addr := net.JoinHostPort("127.0.0.1", port)
	good := clientTLS(t, certs, certs, "viewer")
	for _, tc := range []struct {
		name   string
		cfg    ClientConfig
		status string
		reason string
		is     error
	}{
		{"no client certificate", ClientConfig{TLS: clientTLS(t, certs, "", ""), Token: token}, "401", "client certificate required", ErrRefused},
		{"certificate of another CA", ClientConfig{TLS: clientTLS(t, certs, other, "viewer"), Token: token}, "403", "client certificate refused", ErrRefused},
		{"no token", ClientConfig{TLS: good}, "401", "token required", ErrRefused},
		{"wrong token", ClientConfig{TLS: good, Token: token + "x"}, "403", "wrong token", ErrRefused},
		{"plain HTTP", ClientConfig{Token: token}, "403", "requires HTTPS", ErrRefused},
		{"bad time", ClientConfig{TLS: good, Token: token, Params: Params{Since: "yesterday"}}, "400", `since: bad time: "yesterday"`, ErrBadRequest},
		{"bad filter", ClientConfig{TLS: good, Token: token, Params: Params{Filter: "udp port 99999"}}, "400",
			`filter: capture: compiling filter "udp port 99999": illegal port number 99999 > 65535`, ErrBadRequest},
		{"filter beyond the limits", ClientConfig{TLS: good, Token: token, Params: Params{Filter: strings.Repeat("port 1 or ", 48) + "port 2"}}, "400",
			"filter: filter beyond the limits: 49 terms (primitives joined by and/or), at most 48", ErrBadRequest},
		{"empty range", ClientConfig{TLS: good, Token: token, Params: Params{Since: "1780000001", Until: "1780000000"}}, "400", "empty time range", ErrBadRequest},
		{"agent path", ClientConfig{TLS: good, Token: token, Params: Params{Agents: []string{"../etc"}}}, "400", "agent: agent name", ErrBadRequest},
		{"agent glob path", ClientConfig{TLS: good, Token: token, Params: Params{Agents: []string{"*/.."}}}, "400", "no '/'", ErrBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Addr = addr
			var out bytes.Buffer
			_, err := Fetch(context.Background(), tc.cfg, &out)
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), "("+tc.status+" ") || !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("err = %v, want %v with status %s and %q", err, tc.is, tc.status, tc.reason)
			}
			if out.Len() != 0 {
				t.Errorf("%d bytes written on a refusal", out.Len())
			}
		})
	}
	c := &s.Counters
	for _, x := range []struct {
		name string
		got  uint64
		want uint64
	}{{"unauthorized", c.Unauthorized.Load(), 2}, {"forbidden", c.Forbidden.Load(), 3}, {"bad_request", c.BadRequest.Load(), 6}, {"ok", c.OK.Load(), 0}} {
		if x.got != x.want {
			t.Errorf("%s counter %d, want %d", x.name, x.got, x.want)
		}
	}

	// On loopback, plain HTTP is admitted, with the token.
	lo := startServer(t, Config{Listen: "127.0.0.1:0", Dir: dir, TLS: serverTLS(t, certs), Token: token})
	if _, err := Fetch(context.Background(), ClientConfig{Addr: lo.Addr(), Token: token}, io.Discard); err != nil {
		t.Errorf("plain HTTP with the token on loopback: %v", err)
	}
	if _, err := Fetch(context.Background(), ClientConfig{Addr: lo.Addr()}, io.Discard); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "token required") {
		t.Errorf("plain HTTP without the token on loopback: %v", err)
	}
}

// blockingRun stands for query.Run: it writes a header's worth of
// bytes, says it started, and waits for release or its context.
type blockingRun struct {
	started chan struct{}
	release chan struct{}
	ctxErr  chan error
}

func newBlockingRun() *blockingRun {
	return &blockingRun{started: make(chan struct{}, 8), release: make(chan struct{}), ctxErr: make(chan error, 8)}
}

func (b *blockingRun) run(ctx context.Context, _ *query.Prepared, w io.Writer) (query.Result, error) {
	if _, err := w.Write([]byte("pcapng-ish")); err != nil {
		return query.Result{}, err
	}
	b.started <- struct{}{}
	select {
	case <-b.release:
		return query.Result{Packets: 1, Bytes: 10}, nil
	case <-ctx.Done():
		b.ctxErr <- ctx.Err()
		return query.Result{Bytes: 10}, ctx.Err()
	}
}

// TestBusy: beyond MaxQueries running, a query is refused with 503.
func TestBusy(t *testing.T) {
	s := startServer(t, Config{Listen: "127.0.0.1:0", Dir: t.TempDir(), MaxQueries: 1})
	b := newBlockingRun()
	s.run = b.run
	first := make(chan error, 1)
	go func() {
		_, err := Fetch(context.Background(), ClientConfig{Addr: s.Addr()}, io.Discard)
		first <- err
	}()
	<-b.started
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a regression answers, or hangs: bound it
	defer cancel()
	_, err := Fetch(ctx, ClientConfig{Addr: s.Addr()}, io.Discard)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "too many queries running (1)") {
		t.Errorf("second query: %v, want 503 too many queries", err)
	}
	if n := s.Counters.Active.Load(); n != 1 {
		t.Errorf("active %d, want 1", n)
	}
	close(b.release)
	if err := <-first; err != nil {
		t.Errorf("first query: %v", err)
	}
	if _, err := Fetch(context.Background(), ClientConfig{Addr: s.Addr()}, io.Discard); err != nil {
		t.Errorf("a query after the first ended: %v", err)
	}
	if s.Counters.Busy.Load() != 1 || s.Counters.OK.Load() != 2 {
		t.Errorf("busy %d, ok %d: want 1 and 2", s.Counters.Busy.Load(), s.Counters.OK.Load())
	}
}

// TestClientGoneCancels: a client that goes away cancels its query.
func TestClientGoneCancels(t *testing.T) {
	s := startServer(t, Config{Listen: "127.0.0.1:0", Dir: t.TempDir()})
	b := newBlockingRun()
	s.run = b.run
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := Fetch(ctx, ClientConfig{Addr: s.Addr()}, io.Discard)
		done <- err
	}()
	<-b.started
	cancel()
	if err := <-done; err == nil {
		t.Error("Fetch succeeded after its context ended")
	}
	select {
	case err := <-b.ctxErr:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the query's context ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the query's context did not end when its client went away")
	}
	testutil.EventuallyTrue(t, 5*time.Second, "canceled counted, none active", func() bool {
		return s.Counters.Canceled.Load() == 1 && s.Counters.Active.Load() == 0
	})
}

// TestFailures: a query that fails after its stream began ends with the
// bytes written and the error in the trailer; one that fails before is
// a 500; a server stopping ends its queries with the reason.
func TestFailures(t *testing.T) {
	s := startServer(t, Config{Listen: "127.0.0.1:0", Dir: t.TempDir()})
	s.run = func(_ context.Context, _ *query.Prepared, w io.Writer) (query.Result, error) {
		w.Write([]byte("partial"))
		return query.Result{Packets: 3, Bytes: 7}, fmt.Errorf("agent a1: x.pcapng: %w", query.ErrFileGone)
	}
	var out bytes.Buffer
	res, err := Fetch(context.Background(), ClientConfig{Addr: s.Addr()}, &out)
	if !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "x.pcapng: file removed before it was read") {
		t.Errorf("mid-stream failure: %v", err)
	}
	if out.String() != "partial" || res.Packets != 3 {
		t.Errorf("mid-stream failure: output %q, result %+v", out.String(), res)
	}
	s.run = func(context.Context, *query.Prepared, io.Writer) (query.Result, error) {
		return query.Result{}, errors.New("output root: permission denied")
	}
	out.Reset()
	if _, err := Fetch(context.Background(), ClientConfig{Addr: s.Addr()}, &out); !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "500") ||
		!strings.Contains(err.Error(), "permission denied") || out.Len() != 0 {
		t.Errorf("failure before the stream: %v, %d bytes", err, out.Len())
	}
	if s.Counters.Failed.Load() != 2 {
		t.Errorf("failed counter %d, want 2", s.Counters.Failed.Load())
	}

	// Shutdown.
	st, err := New(Config{Listen: "127.0.0.1:0", Dir: t.TempDir(), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	b := newBlockingRun()
	st.run = b.run
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- st.Run(ctx) }()
	fetched := make(chan error, 1)
	go func() {
		_, err := Fetch(context.Background(), ClientConfig{Addr: st.Addr()}, io.Discard)
		fetched <- err
	}()
	<-b.started
	cancel()
	if err := <-ran; err != nil {
		t.Errorf("Run: %v", err)
	}
	if err := <-fetched; !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "the server is stopping") {
		t.Errorf("query at shutdown: %v", err)
	}
}

// TestResultCoverage: the Result in the trailer of GET /query carries
// each selected agent's coverage, as the local query's; a selection
// that matches no agent of the server is still a 200 with an empty
// pcapng, its Result not Covered (a federated query asks servers that
// may not hold an agent).
func TestResultCoverage(t *testing.T) {
	dir := writeFixture(t, 20, "a1", "b1")
	s := startServer(t, Config{Listen: "127.0.0.1:0", Dir: dir})
	for _, c := range []struct {
		agents  []string
		covered bool
		want    []string // agents in the coverage
	}{
		{agents: []string{"a1"}, covered: true, want: []string{"a1"}},
		{agents: nil, covered: true, want: []string{"a1", "b1"}},
		{agents: []string{"zz"}, covered: false, want: nil},
	} {
		var out bytes.Buffer
		res, err := Fetch(context.Background(), ClientConfig{Addr: s.Addr(), Params: Params{Agents: c.agents}}, &out)
		if err != nil {
			t.Fatalf("%v: %v", c.agents, err)
		}
		if res.Covered() != c.covered || res.Coverage == nil || len(res.Coverage) != len(c.want) {
			t.Fatalf("%v: covered %v, coverage %+v; want %v for %v", c.agents, res.Covered(), res.Coverage, c.covered, c.want)
		}
		for i, a := range c.want {
			cv := res.Coverage[i]
			first := time.Unix(0, base) // the agents interleaved: theirs within the first ms
			if cv.Agent != a || cv.Oldest.Before(first) || !cv.Oldest.Before(first.Add(time.Millisecond)) || !cv.Newest.After(cv.Oldest) || !cv.Overlaps || cv.Files == 0 {
				t.Errorf("%v: coverage of %s: %+v, want its packets from %v", c.agents, a, cv, first.UTC())
			}
		}
		if _, err := pcapfile.NewReader(&out, nil); err != nil {
			t.Errorf("%v: the answer is not pcapng: %v", c.agents, err)
		}
	}
}
