package queryhttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/capture"
	"github.com/pcapsync/pcapsync/internal/flowquery"
	"github.com/pcapsync/pcapsync/internal/testutil"
)

// slowFilter is n portrange terms: far beyond the limits for n = 128,
// a few seconds of libpcap's time, which nothing interrupts.
func slowFilter(n int) string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprintf("portrange %d-%d", i+1, i+100)
	}
	return strings.Join(s, " or ")
}

// promptly bounds an ordinary query on the fixtures here: far more than
// it takes, far less than a pathological filter's compile.
const promptly = time.Second

// TestPathologicalFilter: a filter beyond the limits is refused with
// 400 naming the limit, before it costs a slot or a compile, and an
// ordinary query sent meanwhile is answered promptly.
func TestPathologicalFilter(t *testing.T) {
	dir := writeFixture(t, 50, "a1")
	s := startServer(t, Config{Listen: "127.0.0.1:0", Dir: dir, MaxQueries: 1})
	before := capture.FilterCompiles()
	bad := make(chan error, 1)
	go func() {
		_, err := Fetch(context.Background(), ClientConfig{Addr: s.Addr(), Params: Params{Filter: slowFilter(128)}}, io.Discard)
		bad <- err
	}()
	var badErr error
	testutil.EventuallyTrue(t, 10*time.Second, "the pathological query refused, or compiling", func() bool {
		select {
		case badErr = <-bad:
			return true
		default:
			return capture.FilterCompiles() != before
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), promptly)
	defer cancel()
	start := time.Now()
	if _, err := Fetch(ctx, ClientConfig{Addr: s.Addr(), Params: Params{Filter: "udp", Agents: []string{"a1"}}}, io.Discard); err != nil {
		t.Errorf("an ordinary query beside a pathological filter: %v after %v", err, time.Since(start))
	}
	if badErr == nil {
		badErr = <-bad
	}
	if !errors.Is(badErr, ErrBadRequest) || !strings.Contains(badErr.Error(), "400") ||
		!strings.Contains(badErr.Error(), "filter beyond the limits: 128 terms (primitives joined by and/or), at most 48") {
		t.Errorf("the pathological filter: %v, want 400 naming the limit", badErr)
	}
	if n := capture.FilterCompiles() - before; n != 1 || s.Counters.BadRequest.Load() != 1 || s.Counters.OK.Load() != 1 {
		t.Errorf("%d compiles, %d bad requests, %d served: want 1, 1, 1", n, s.Counters.BadRequest.Load(), s.Counters.OK.Load())
	}
}

// TestCompilerBusy: while libpcap is busy with a slow filter (compiled
// here, beyond the limits a query has), a query with a filter is
// refused 503 once CompileTimeout has passed, a client that goes away
// while its query waits for the compiler cancels it at once, and a
// query without a filter is served: none waits for the slow compile.
func TestCompilerBusy(t *testing.T) {
	dir := writeFixture(t, 50, "a1")
	s := startServer(t, Config{Listen: "127.0.0.1:0", Dir: dir, CompileTimeout: 200 * time.Millisecond})
	before := capture.FilterCompiles()
	slow := make(chan struct{})
	go func() {
		defer close(slow)
		if _, err := capture.CompileFilter(capture.LinkTypeEthernet, 0, slowFilter(128)); err != nil {
			t.Error(err)
		}
	}()
	t.Cleanup(func() { <-slow })
	testutil.EventuallyTrue(t, 10*time.Second, "the slow filter compiling", func() bool { return capture.FilterCompiles() != before })
	busy := func(t *testing.T) {
		t.Helper()
		select {
		case <-slow:
			t.Fatal("the slow compile ended first: the test proves nothing")
		default:
		}
	}

	t.Run("compile timeout", func(t *testing.T) {
		_, err := Fetch(context.Background(), ClientConfig{Addr: s.Addr(), Params: Params{Filter: "udp"}}, io.Discard)
		busy(t)
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "503") ||
			!strings.Contains(err.Error(), "the filter was not compiled within 200ms") {
			t.Errorf("err %v, want 503 naming the compile timeout", err)
		}
	})
	t.Run("client gone", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := Fetch(ctx, ClientConfig{Addr: s.Addr(), Params: Params{Filter: "tcp"}}, io.Discard)
			done <- err
		}()
		testutil.EventuallyTrue(t, 5*time.Second, "a query waiting for the compiler", func() bool { return s.Counters.Compiling.Load() == 1 })
		cancel()
		if err := <-done; err == nil {
			t.Error("Fetch succeeded after its context ended")
		}
		testutil.EventuallyTrue(t, 5*time.Second, "canceled counted, none compiling", func() bool {
			return s.Counters.Canceled.Load() == 1 && s.Counters.Compiling.Load() == 0
		})
		busy(t)
	})
	t.Run("no filter", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), promptly)
		defer cancel()
		if _, err := Fetch(ctx, ClientConfig{Addr: s.Addr()}, io.Discard); err != nil {
			t.Errorf("a query without a filter: %v", err)
		}
		busy(t)
	})
	if n := capture.FilterCompiles() - before; n != 1 {
		t.Errorf("%d compiles while the slow one ran, want none", n-1)
	}
}

// TestFilterNamesRefused: a filter naming a host, a network or an
// Ethernet host is refused with 400 naming the words, compiling nothing
// (the server would look the names up inside libpcap's one-at-a-time
// compiler); names of ports right after port are served, as are
// addresses, for GET /query and GET /flows alike.
func TestFilterNamesRefused(t *testing.T) {
	dir := writeFixture(t, 50, "a1")
	s := startServer(t, Config{Listen: "127.0.0.1:0", Dir: dir})
	before := capture.FilterCompiles()
	for _, tc := range []struct {
		filter, want string
	}{
		{"host db1.example.invalid and udp", `"db1.example.invalid" would be looked up as a host`},
		{"udp and (net lab or ether host gw)", `"lab", "gw" would be looked up`},
		{`host \ip`, `"\\ip"`},
	} {
		for _, flows := range []bool{false, true} {
			var err error
			if flows {
				_, err = FetchFlows(context.Background(), ClientConfig{Addr: s.Addr(), Params: Params{Filter: tc.filter}}, func(*flowquery.JSON) error { return nil })
			} else {
				_, err = Fetch(context.Background(), ClientConfig{Addr: s.Addr(), Params: Params{Filter: tc.filter}}, io.Discard)
			}
			if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("filter %q (flows %v): %v, want 400 naming %s", tc.filter, flows, err, tc.want)
			}
		}
	}
	if n := capture.FilterCompiles() - before; n != 0 {
		t.Errorf("%d compiles for filters refused before compiling", n)
	}
	for _, f := range []string{"udp port domain or udp port 53", "host 10.0.0.1 or ether host aa:bb:cc:dd:ee:ff or ip6 host fe80::1"} {
		if _, err := Fetch(context.Background(), ClientConfig{Addr: s.Addr(), Params: Params{Filter: f, Agents: []string{"a1"}}}, io.Discard); err != nil {
			t.Errorf("filter %q: %v", f, err)
		}
	}
}
