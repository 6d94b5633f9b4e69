package tap

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/testutil"
)

type streamResult struct {
	n   int64
	err error
}

// startStream runs Stream into out until it returns.
func startStream(ctx context.Context, cfg StreamConfig, out *testutil.Buffer) <-chan streamResult {
	done := make(chan streamResult, 1)
	go func() {
		n, err := Stream(ctx, cfg, out)
		done <- streamResult{n, err}
	}()
	return done
}

func waitStream(t *testing.T, done <-chan streamResult) streamResult {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("Stream did not return")
	}
	return streamResult{}
}

// TestStream: Stream sends the request (agent, interface, filter,
// token) and copies exactly the selected packets, as the tap sent them;
// when the tap ends the stream it says so with ErrStreamEnded.
func TestStream(t *testing.T) {
	const token = "0123456789abcdef"
	tp, addr, stop := startTap(t, Config{Token: token}, ListenConfig{})
	var out testutil.Buffer
	done := startStream(t.Context(), StreamConfig{Addr: addr,
		Request: Request{Agent: "a1", Iface: "eth0", Filter: "udp and ip[4:2] < 25", Token: token}}, &out)
	waitClients(t, tp, 1)
	var want []streamPacket
	for b, seq := 0, uint64(0); b < 6; b, seq = b+1, seq+10 {
		agent := []string{"a1", "a2"}[b%2]
		for s := seq; s < seq+10; s++ {
			if agent == "a1" && s%2 == 0 && s < 25 {
				want = append(want, streamPacket{"a1:eth0", s})
			}
		}
		tp.Batch(event(t, agent, uint64(b+1), seq, seq+10, 200))
	}
	stop()
	r := waitStream(t, done)
	if !errors.Is(r.err, ErrStreamEnded) {
		t.Fatalf("Stream = %v, want ErrStreamEnded", r.err)
	}
	raw := out.String()
	if r.n != int64(len(raw)) || int64(tp.Counters.Bytes.Load()) != r.n {
		t.Errorf("Stream counted %d bytes, wrote %d, the tap sent %d", r.n, len(raw), tp.Counters.Bytes.Load())
	}
	got := readStream(t, strings.NewReader(raw))
	if len(got) != len(want) {
		t.Fatalf("%d packets %v, want %d %v", len(got), got, len(want), want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("packet %d is %v, want %v", i, got[i], want[i])
		}
	}
}

// TestStreamRefused: the tap's error line comes back as ErrRefused with
// the tap's reason, and nothing is written.
func TestStreamRefused(t *testing.T) {
	_, addr, _ := startTap(t, Config{Token: "0123456789abcdef"}, ListenConfig{})
	for _, tt := range []struct {
		req  Request
		want string
	}{
		{Request{Agent: "a1"}, "token required"},
		{Request{Agent: "a1", Token: "0123456789abcdeX"}, "wrong token"},
		{Request{Token: "0123456789abcdef", Filter: "udp port 99999"}, "filter"},
	} {
		var out testutil.Buffer
		r := waitStream(t, startStream(t.Context(), StreamConfig{Addr: addr, Request: tt.req}, &out))
		if !errors.Is(r.err, ErrRefused) || !strings.Contains(r.err.Error(), tt.want) || r.n != 0 || out.String() != "" {
			t.Errorf("%+v: %d bytes, %v; want a refusal about %q and nothing written", tt.req, r.n, r.err, tt.want)
		}
	}
}

// TestStreamCancel: ending ctx ends a stream that is waiting for
// packets, without an error.
func TestStreamCancel(t *testing.T) {
	tp, addr, _ := startTap(t, Config{}, ListenConfig{})
	ctx, cancel := context.WithCancel(t.Context())
	var out testutil.Buffer
	done := startStream(ctx, StreamConfig{Addr: addr, Request: Request{Agent: "a1"}}, &out)
	waitClients(t, tp, 1)
	tp.Batch(event(t, "a1", 1, 0, 4, 200))
	cancel()
	if r := waitStream(t, done); r.err != nil {
		t.Fatalf("Stream after cancel = %d bytes, %v; want nil", r.n, r.err)
	}
}

func TestStreamConfigValidate(t *testing.T) {
	for _, tt := range []struct {
		cfg  StreamConfig
		want string
	}{
		{StreamConfig{Addr: "127.0.0.1:7740"}, ""},
		{StreamConfig{}, "no address"},
		{StreamConfig{Addr: "127.0.0.1"}, "missing port"},
		{StreamConfig{Addr: "127.0.0.1:7740", DialTimeout: -1}, "negative"},
	} {
		err := tt.cfg.Validate()
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%+v: Validate = %v, want %q", tt.cfg, err, tt.want)
		}
	}
}
