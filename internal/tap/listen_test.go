package tap

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
)

func TestParseListener(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Listener
		bad  bool
	}{
		{in: "127.0.0.1:7740", want: Listener{Addr: "127.0.0.1:7740"}},
		{in: "127.0.0.1:7740=web1", want: Listener{"127.0.0.1:7740", Selection{Agent: "web1"}}},
		{in: "[::1]:7740=web1:eth0:1", want: Listener{"[::1]:7740", Selection{Agent: "web1", Iface: "eth0:1"}}},
		{in: ":7740=*", want: Listener{Addr: ":7740"}},
		{in: ":7740=*:eth0", want: Listener{":7740", Selection{Iface: "eth0"}}},
		{in: "127.0.0.1", bad: true},
		{in: "127.0.0.1:7740=../x", bad: true},
		{in: "127.0.0.1:7740=:eth0", bad: true},
	} {
		got, err := ParseListener(tt.in)
		if (err != nil) != tt.bad || !tt.bad && got != tt.want {
			t.Errorf("ParseListener(%q) = %+v, %v", tt.in, got, err)
		}
		if tt.bad {
			continue
		}
		if back, err := ParseListener(got.String()); err != nil || back != got {
			t.Errorf("ParseListener(%q.String() = %q) = %+v, %v", tt.in, got.String(), back, err)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tt := range []struct {
		cfg  Config
		want string // "" valid
	}{
		{Config{}, ""},
		{Config{QueueSize: MinQueueSize, Listen: []Listener{{Addr: "127.0.0.1:0"}}}, ""},
		{Config{QueueSize: MinQueueSize - 1}, "queue size 65535 out of range"},
		{Config{QueueSize: MaxQueueSize + 1}, "out of range"},
		{Config{MaxClients: -1}, "max clients"},
		{Config{DrainTimeout: -1}, "negative"},
		{Config{Listen: []Listener{{Addr: "nope"}}}, "listener \"nope\""},
		{Config{Listen: []Listener{{Addr: ":1", Default: Selection{Agent: "a/b"}}}}, "agent"},
	} {
		err := tt.cfg.Validate()
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%+v: Validate() = %v, want %q", tt.cfg, err, tt.want)
		}
	}
}

// TestRun: New opens the listeners of Config.Listen, Run serves them
// (a client gets a pcapng stream) and returns once its context ended.
func TestRun(t *testing.T) {
	tp, err := New(Config{Listen: []Listener{{Addr: "127.0.0.1:0"}, {Addr: "127.0.0.1:0"}},
		RequestWait: 10e6, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if len(tp.Addrs()) != 2 {
		t.Fatalf("Addrs() = %v, want 2", tp.Addrs())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tp.Run(ctx) }()
	var conns []net.Conn
	for _, addr := range tp.Addrs() {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	waitClients(t, tp, 2) // served on both listeners
	for _, c := range conns {
		c.Close()
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// TestNewPortTaken: a listener that cannot be opened fails New, and the
// ones opened before it are closed again.
func TestNewPortTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	freeAddr := free.Addr().String()
	free.Close()
	_, err = New(Config{Listen: []Listener{{Addr: freeAddr}, {Addr: ln.Addr().String()}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil {
		t.Fatal("New with a taken port succeeded")
	}
	again, err := net.Listen("tcp", freeAddr)
	if err != nil {
		t.Fatalf("the first listener was left open: %v", err)
	}
	again.Close()
}
