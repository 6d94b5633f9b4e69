package serve

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/collector"
	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/kafkaconn"
	"github.com/pcapsync/pcapsync/internal/metrics"
	"github.com/pcapsync/pcapsync/internal/redisfeed"
	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/tap"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func base(t *testing.T) Config {
	return Config{Collector: collector.Config{Store: store.Config{Dir: t.TempDir()}, Insecure: true},
		Listen: "127.0.0.1:0", Logger: quiet()}
}

// TestValidate: the rules across parts, each with the flag it names;
// every error wraps ErrConfig.
func TestValidate(t *testing.T) {
	sp := compress.Spec{Codec: compress.Zstd}
	for _, tt := range []struct {
		name string
		edit func(c *Config)
		want string // "" valid
	}{
		{"insecure", func(c *Config) {}, ""},
		{"udp", func(c *Config) { c.ListenUDP = "127.0.0.1:0" }, ""},
		{"no security", func(c *Config) { c.Collector.Insecure = false }, "no transport security chosen"},
		{"udp without insecure", func(c *Config) {
			c.Collector.Insecure = false
			c.TLSCertFile, c.TLSKeyFile, c.ListenUDP = "c", "k", ":1"
		}, "ListenUDP: UDP is plaintext"},
		{"tls and insecure", func(c *Config) { c.TLSCertFile, c.TLSKeyFile = "c", "k" }, "exclude each other (except with ListenUDP"},
		{"tls and insecure for udp", func(c *Config) { c.TLSCertFile, c.TLSKeyFile, c.ListenUDP = "c", "k", ":1" }, ""},
		{"client ca alone", func(c *Config) { c.Collector.Insecure = false; c.TLSKeyFile, c.TLSClientCAFile = "k", "ca" }, "TLSClientCAFile needs TLSCertFile"},
		{"tap queue without tap", func(c *Config) { c.Tap.QueueSize = 1 << 20 }, "Tap.QueueSize needs Tap.Listen"},
		{"tap queue out of range", func(c *Config) { c.Tap.Listen = []tap.Listener{{Addr: ":1"}}; c.Tap.QueueSize = 1 }, "(QueueSize)"},
		{"redis compress without redis", func(c *Config) { c.Redis.Compress = &sp }, "Redis.Compress needs Redis.URL"},
		{"redis max age without redis", func(c *Config) { c.Redis.MaxAge = time.Minute }, "Redis.MaxAge needs Redis.URL"},
		{"redis lz4", func(c *Config) {
			c.Redis.URL = "redis://127.0.0.1:1"
			c.Redis.Compress = &compress.Spec{Codec: compress.LZ4}
		}, "entry compression lz4"},
		{"pprof without metrics", func(c *Config) { c.Metrics.Pprof = true }, "(Pprof)"},
		{"collector rule", func(c *Config) { c.Collector.MaxConns = -1 }, "max conns"},
		{"store rule", func(c *Config) { c.Collector.Store.Dir = "" }, "output directory is required"},
		{"query", func(c *Config) { c.Query.Listen = "127.0.0.1:0" }, ""},
		{"query conns without query", func(c *Config) { c.Query.MaxConns = 5 }, "Query.MaxConns needs Query.Listen"},
		{"tap conns without tap", func(c *Config) { c.Tap.MaxConns = 5 }, "Tap.MaxConns needs Tap.Listen"},
		{"metrics conns without metrics", func(c *Config) { c.Metrics.MaxConns = 5 }, "Metrics.MaxConns needs Metrics.Addr"},
		{"query max without query", func(c *Config) { c.Query.MaxQueries = 2 }, "Query.MaxQueries needs Query.Listen"},
		{"query max out of range", func(c *Config) { c.Query.Listen, c.Query.MaxQueries = ":0", 5000 }, "(MaxQueries)"},
		{"query bad address", func(c *Config) { c.Query.Listen = "nowhere" }, "(Listen)"},
		{"query on an ingest collector", func(c *Config) {
			c.Role, c.Collector.Store.Dir, c.Kafka.Brokers, c.Query.Listen = RoleIngest, "", []string{"127.0.0.1:1"}, ":0"
		}, "give them to the writers"},
		{"writer query without security", func(c *Config) {
			c.Role, c.Kafka.Brokers, c.Group, c.Collector.Insecure, c.Query.Listen = RoleWriter, []string{"127.0.0.1:1"}, "g", false, ":0"
		}, "Query.Listen: no transport security chosen"},
		{"writer console without security", func(c *Config) {
			c.Role, c.Kafka.Brokers, c.Group, c.Collector.Insecure, c.Console.Listen = RoleWriter, []string{"127.0.0.1:1"}, "g", false, ":0"
		}, "Console.Listen: no transport security chosen"},
		{"writer console insecure", func(c *Config) {
			c.Role, c.Kafka.Brokers, c.Group, c.Console.Listen = RoleWriter, []string{"127.0.0.1:1"}, "g", ":0"
		}, ""},
		{"console", func(c *Config) { c.Console.Listen = "127.0.0.1:0" }, ""},
		{"console bad address", func(c *Config) { c.Console.Listen = "nowhere" }, "(Console.Listen)"},
		{"console conns without console", func(c *Config) { c.Console.MaxConns = 5 }, "Console.MaxConns needs Console.Listen"},
		{"console on an ingest collector", func(c *Config) {
			c.Role, c.Collector.Store.Dir, c.Kafka.Brokers, c.Console.Listen = RoleIngest, "", []string{"127.0.0.1:1"}, ":0"
		}, "give them to the writers"},
		{"writer query insecure", func(c *Config) {
			c.Role, c.Kafka.Brokers, c.Group, c.Query.Listen = RoleWriter, []string{"127.0.0.1:1"}, "g", ":0"
		}, ""},
		{"writer query tls", func(c *Config) {
			c.Role, c.Kafka.Brokers, c.Group, c.Collector.Insecure, c.Query.Listen = RoleWriter, []string{"127.0.0.1:1"}, "g", false, ":0"
			c.TLSCertFile, c.TLSKeyFile, c.TLSClientCAFile = "c", "k", "ca"
		}, ""},
		{"writer security without a listener", func(c *Config) { c.Role, c.Kafka.Brokers, c.Group = RoleWriter, []string{"127.0.0.1:1"}, "g" }, "are for Query.Listen, Console.Listen and Tap.Listen"},
		{"collector with kafka", func(c *Config) { c.Kafka.Brokers = []string{"127.0.0.1:1"} }, "role collector: Kafka.Brokers set"},
		{"ingest without kafka", func(c *Config) { c.Role, c.Collector.Store.Dir = RoleIngest, "" }, "role ingest collector: Kafka.Brokers required"},
		{"ingest with a group", func(c *Config) {
			c.Role, c.Collector.Store.Dir, c.Kafka.Brokers, c.Group = RoleIngest, "", []string{"127.0.0.1:1"}, "g"
		}, "Group is a writer's"},
		{"writer without a group", func(c *Config) { c.Role, c.Kafka.Brokers = RoleWriter, []string{"127.0.0.1:1"} }, "role writer: Group required"},
		{"no such role", func(c *Config) { c.Role = 7 }, "Role(7) is not one"},
		{"writer tap without security", func(c *Config) {
			c.Role, c.Kafka.Brokers, c.Group, c.Collector.Insecure = RoleWriter, []string{"127.0.0.1:1"}, "g", false
			c.Tap.Listen = []tap.Listener{{Addr: "127.0.0.1:0"}}
		}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := base(t)
			tt.edit(&c)
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate() = %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrConfig)):
				t.Fatalf("Validate() = %v, want ErrConfig with %q", err, tt.want)
			}
		})
	}
}

// TestNewFails: a bad file or a taken port fails New with what was
// opened before it closed again (the tap's port can be taken again, the
// store's root opened again).
func TestNewFails(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	empty := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(t.TempDir(), "record.key")
	if err := os.WriteFile(short, []byte("fifteen bytes!!\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ingest := func(keyFile string) func(c *Config) {
		return func(c *Config) {
			c.Role, c.Collector.Store.Dir = RoleIngest, ""
			c.Kafka = kafkaconn.Config{Brokers: []string{"127.0.0.1:1"}, RecordKeyFile: keyFile}
		}
	}
	free := freeport.Addr(t)
	for _, tt := range []struct {
		name   string
		edit   func(c *Config)
		config bool // ErrConfig
	}{
		{"empty token", func(c *Config) { c.TokenFile = empty }, true},
		{"missing certificate", func(c *Config) { c.Collector.Insecure = false; c.TLSCertFile, c.TLSKeyFile = "no-such.pem", "k.pem" }, true},
		{"agents' port taken", func(c *Config) { c.Tap.Listen = []tap.Listener{{Addr: free}}; c.Listen = taken.Addr().String() }, false},
		{"metrics port taken", func(c *Config) { c.Metrics.Addr = taken.Addr().String() }, false},
		{"record key too short", ingest(short), true},
		{"record key file empty", ingest(empty), true},
		{"record key file missing", ingest("no-such.key"), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := base(t)
			tt.edit(&c)
			_, err := New(c)
			if err == nil || errors.Is(err, ErrConfig) != tt.config {
				t.Fatalf("New() = %v, want an error (ErrConfig: %v)", err, tt.config)
			}
			ln, err := net.Listen("tcp", free)
			if err != nil {
				t.Fatalf("the tap's listener was left open: %v", err)
			}
			ln.Close()
		})
	}
}

// TestRun: a Service with every part runs and stops when its context
// ends, its parts' counters readable afterwards.
func TestRun(t *testing.T) {
	c := base(t)
	c.ListenUDP = "127.0.0.1:0"
	c.Tap.Listen = []tap.Listener{{Addr: "127.0.0.1:0"}}
	c.Redis = redisfeed.Config{URL: "redis://127.0.0.1:1", Timeout: 100 * time.Millisecond}
	c.Metrics = metrics.Config{Addr: "127.0.0.1:0"}
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	if s.UDP() == nil || s.Tap() == nil || s.Redis() == nil || s.Core() == nil {
		t.Fatal("a part is missing")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	conn, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatalf("dialing the agents' port: %v", err)
	}
	conn.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

// TestBudget: the connection caps left zero are derived from the
// descriptors the store's budget and the reserve leave, and caps given
// that need more descriptors than RLIMIT_NOFILE are refused, naming the
// flags.
func TestBudget(t *testing.T) {
	all := func(c *Config) {
		c.Tap.Listen = []tap.Listener{{Addr: "127.0.0.1:0"}, {Addr: "127.0.0.1:0"}}
		c.Query.Listen, c.Metrics.Addr = "127.0.0.1:0", "127.0.0.1:0"
	}
	for _, tt := range []struct {
		name   string
		nofile uint64
		edit   func(c *Config)
		want   [4]int // agents, tap (each), query, metrics
		err    string
	}{
		// (1024-256)/2 = 384 files; of the 384 left: 24 per tap, 48, 24, the rest.
		{"defaults", 1024, all, [4]int{264, 24, 48, 24}, ""},
		{"agents only", 1024, func(*Config) {}, [4]int{384}, ""},
		{"files given", 1024, func(c *Config) { all(c); c.Collector.Store.MaxOpenFiles = 600 }, [4]int{117, 10, 21, 10}, ""},
		{"too many", 1024, func(c *Config) { all(c); c.Collector.MaxConns = 16384 }, [4]int{16384, 24, 48, 24}, "Collector.MaxConns 16384, Tap.MaxConns 24, Query.MaxConns 48, Metrics.MaxConns 24"},
		{"writer", 1024, func(c *Config) {
			c.Query.Listen = "127.0.0.1:0"
			c.Role, c.Kafka.Brokers, c.Group = RoleWriter, []string{"x:9092"}, "g"
		}, [4]int{0, 0, 48, 0}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := base(t)
			tt.edit(&c)
			s := &Service{cfg: c}
			err := s.budget(tt.nofile)
			got := [4]int{s.cfg.Collector.MaxConns, s.cfg.Tap.MaxConns, s.cfg.Query.MaxConns, s.cfg.Metrics.MaxConns}
			if got != tt.want || (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("caps %v, err %v; want %v, error %q", got, err, tt.want, tt.err)
			}
		})
	}
}

// TestListenersBindTheirStack: every listener of the service given
// 0.0.0.0 binds IPv4 only (frontdoor.ListenNetwork), where Go's "tcp"
// and "udp" would bind [::] on both stacks.
func TestListenersBindTheirStack(t *testing.T) {
	const any4 = "0.0.0.0:0"
	c := base(t)
	c.Listen, c.ListenUDP = any4, any4
	c.Tap.Listen = []tap.Listener{{Addr: any4}}
	c.Metrics = metrics.Config{Addr: any4}
	c.Query.Listen = any4
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // Run with its context ended shuts everything down
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := s.Run(ctx); err != nil {
			t.Error(err)
		}
	})
	addrs := map[string]string{"agents": s.Addr().String(), "udp": s.uconn.LocalAddr().String(),
		"metrics": s.msrv.Addr(), "query": s.query.Addr()}
	for i, a := range s.Tap().Addrs() {
		addrs["tap "+strconv.Itoa(i)] = a
	}
	if len(addrs) != 5 {
		t.Fatalf("listeners %q, want five", addrs)
	}
	for name, a := range addrs {
		if !strings.HasPrefix(a, "0.0.0.0:") {
			t.Errorf("the %s listener is bound to %s, want 0.0.0.0 (IPv4 only)", name, a)
		}
	}
}

// TestRecordKeys: an ingest collector's or writer's record keys must be
// the topic's: an agent's key, as the key or the previous one, and a
// previous key without a key are configuration errors; the topic's key
// with a previous one is taken.
func TestRecordKeys(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{"topic": "the-key-of-the-topic-0123\n", "old": "the-old-key-of-the-topic\n",
		"agent": "pcapsync-agent-key web1 " + strings.Repeat("ab", 32) + "\n"}
	for name, text := range files {
		files[name] = filepath.Join(dir, name)
		if err := os.WriteFile(files[name], []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		key, prev string
		ok        bool
	}{
		{"topic", "", true},
		{"topic", "old", true},
		{"agent", "", false},
		{"topic", "agent", false},
		{"", "old", false},
	} {
		k, err := recordKey(kafkaconn.Config{RecordKeyFile: files[tt.key], PreviousRecordKeyFile: files[tt.prev]})
		if tt.ok != (err == nil) || err != nil && !errors.Is(err, ErrConfig) || tt.ok && k == nil {
			t.Errorf("key %q, previous %q: %v (key %v), want ok %v (or ErrConfig)", tt.key, tt.prev, err, k != nil, tt.ok)
		}
	}
}
