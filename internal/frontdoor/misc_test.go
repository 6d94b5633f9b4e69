package frontdoor

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestBearerToken(t *testing.T) {
	for _, tt := range []struct {
		header, token string
		ok            bool
	}{
		{"Bearer abc", "abc", true},
		{"bearer abc", "abc", true}, // RFC 7235: the scheme is case-insensitive
		{"BEARER abc", "abc", true},
		{"bEaReR  abc ", "abc", true},
		{"Bearer", "", false},
		{"Bearer ", "", false},
		{"Basic abc", "", false},
		{"Bearerabc", "", false},
		{"", "", false},
	} {
		token, ok := BearerToken(tt.header)
		if token != tt.token || ok != tt.ok {
			t.Errorf("BearerToken(%q) = %q, %v; want %q, %v", tt.header, token, ok, tt.token, tt.ok)
		}
	}
}

func TestTokenEqual(t *testing.T) {
	for _, tt := range []struct {
		got, want string
		ok        bool
	}{{"a", "a", true}, {"a", "b", false}, {"", "a", false}, {"ab", "a", false}} {
		if TokenEqual(tt.got, tt.want) != tt.ok {
			t.Errorf("TokenEqual(%q, %q) = %v", tt.got, tt.want, !tt.ok)
		}
	}
}

// TestRateLog: one line per interval, the next one with the count of
// those not logged; concurrent callers share it.
func TestRateLog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var b bytes.Buffer
		log := slog.New(slog.NewTextHandler(&b, nil))
		var r RateLog
		done := make(chan struct{})
		for range 4 {
			go func() {
				for range 250 {
					r.Warn(log, "refused")
				}
				done <- struct{}{}
			}()
		}
		for range 4 {
			<-done
		}
		if n := strings.Count(b.String(), "refused"); n != 1 {
			t.Fatalf("%d lines for 1000 refusals within a second, want 1:\n%s", n, b.String())
		}
		time.Sleep(DefaultLogInterval)
		if !r.Warn(log, "refused") {
			t.Fatal("not logged an interval later")
		}
		if !strings.Contains(b.String(), "not_logged_since_last=999") {
			t.Fatalf("the second line does not count the 999 not logged:\n%s", b.String())
		}
		// At debug, each is logged: WARN, then DEBUG.
		b.Reset()
		debug := slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelDebug}))
		r.Warn(debug, "refused")
		if !strings.Contains(b.String(), "level=DEBUG msg=refused") {
			t.Fatalf("not logged at debug:\n%s", b.String())
		}
		// Each kind has its own limit; at most 16 kinds (and one for
		// the rest) a second.
		b.Reset()
		var kinds RateLog
		for i := range 100 {
			for range 3 {
				kinds.WarnKey(log, fmt.Sprint("reason ", i), "refused")
			}
		}
		if n := strings.Count(b.String(), "refused"); n != maxLogKeys+1 {
			t.Fatalf("%d lines for 100 kinds of refusals, want %d:\n%s", n, maxLogKeys+1, b.String())
		}
	})
}

func TestSniff(t *testing.T) {
	for _, tt := range []struct {
		first []byte
		tls   bool
	}{{[]byte{0x16, 3, 1}, true}, {[]byte("GET / HTTP/1.1\r\n"), false}} {
		a, b := net.Pipe()
		go func() { a.Write(tt.first); a.Close() }()
		c, isTLS, err := Sniff(b)
		if err != nil || isTLS != tt.tls {
			t.Errorf("Sniff(%q) = %v, %v; want %v", tt.first, isTLS, err, tt.tls)
		}
		if got, _ := io.ReadAll(c); !bytes.Equal(got, tt.first) {
			t.Errorf("read after Sniff %q, want %q", got, tt.first)
		}
	}
	a, b := net.Pipe()
	defer a.Close()
	b.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	var ne net.Error
	if _, _, err := Sniff(b); !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("Sniff of a silent peer: %v, want a timeout", err)
	}
	// A client that never finishes its handshake is cut off.
	a, b = net.Pipe()
	defer a.Close()
	if _, err := Handshake(t.Context(), b, &tls.Config{}, 20*time.Millisecond); err == nil {
		t.Error("Handshake with a silent peer succeeded")
	}
}

func TestBudget(t *testing.T) {
	type caps struct{ agents, tap, query, metrics int }
	shares := func(c *caps, taps int) []Share {
		return []Share{
			{Field: "x.MaxConns", Cap: &c.agents},
			{Field: "x.Tap.MaxConns", Cap: &c.tap, Listeners: taps, Divisor: 8, Max: 256},
			{Field: "x.Query.MaxConns", Cap: &c.query, Divisor: 8, Max: 256},
			{Field: "x.Metrics.MaxConns", Cap: &c.metrics, Divisor: 16, Max: 64},
		}
	}
	for _, tt := range []struct {
		name   string
		nofile uint64
		files  int
		taps   int
		in     caps
		want   caps
		err    bool
	}{
		// (1024-256)/2 = 384 files, 384 left: 48, 48, 24, the rest.
		{"1024", 1024, 384, 1, caps{}, caps{264, 48, 48, 24}, false},
		{"two taps", 1024, 384, 2, caps{}, caps{264, 24, 48, 24}, false},
		{"large", 1 << 20, (1<<20 - 256) / 2, 1, caps{}, caps{524160 - 576, 256, 256, 64}, false},
		{"given", 1024, 384, 1, caps{100, 10, 10, 10}, caps{100, 10, 10, 10}, false},
		{"over", 1024, 384, 1, caps{16384, 0, 0, 0}, caps{16384, 48, 48, 24}, true},
		{"files over", 1024, 1000, 1, caps{}, caps{1, 1, 1, 1}, true},
		{"no store", 1024, 0, 1, caps{}, caps{768 - 96 - 96 - 48, 96, 96, 48}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.in
			err := Budget(tt.nofile, tt.files, "x.Files", shares(&c, tt.taps))
			if (err != nil) != tt.err || c != tt.want {
				t.Fatalf("caps %+v, err %v; want %+v, error %v", c, err, tt.want, tt.err)
			}
			if err != nil && !errors.Is(err, ErrConfig) {
				t.Errorf("error %v does not match ErrConfig", err)
			}
			if sum := uint64(c.agents + c.tap*max(tt.taps, 1) + c.query + c.metrics + tt.files + Reserve); err == nil && sum > tt.nofile {
				t.Errorf("caps, files and reserve need %d descriptors of %d", sum, tt.nofile)
			}
		})
	}
}

func TestDefaultPerSource(t *testing.T) {
	for _, tt := range []struct{ max, per int }{{1, 1}, {2, 2}, {4, 4}, {8, 4}, {16, 4}, {64, 16}, {0, DefaultMaxConns / 4}} {
		if got := (Config{MaxConns: tt.max}).WithDefaults().MaxPerSource; got != tt.per {
			t.Errorf("MaxConns %d: %d per source, want %d", tt.max, got, tt.per)
		}
	}
}
