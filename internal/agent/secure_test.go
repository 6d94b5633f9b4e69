package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/testutil"

	"github.com/pcapsync/pcapsync/internal/collector"
	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/kafkaconn"
	"github.com/pcapsync/pcapsync/internal/pki"
	"github.com/pcapsync/pcapsync/internal/pki/pkitest"
	"github.com/pcapsync/pcapsync/internal/store"
)

// realCollector is an in-process collector Server on a loopback port.
type realCollector struct {
	core *collector.Core
	addr string
	dir  string
	log  *testutil.Buffer
}

// startCollector starts a collector for cfg (Dir and Logger set here)
// and stops it in t.Cleanup.
func startCollector(t *testing.T, cfg collector.Config) *realCollector {
	t.Helper()
	rc := &realCollector{dir: filepath.Join(t.TempDir(), "out"), log: &testutil.Buffer{}}
	cfg.Store.Dir, cfg.Logger = rc.dir, slog.New(slog.NewTextHandler(rc.log, nil))
	cfg.Store.RotateInterval = -1 // tests count the files: none cut at the top of an hour
	core, err := collector.NewCore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rc.core, rc.addr = core, ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- collector.NewServer(core).Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-served
		core.Close()
		if t.Failed() {
			t.Logf("collector log:\n%s", rc.log.String())
		}
	})
	return rc
}

// files lists what the collector wrote below its directory (agent
// directories and files, not its own state file).
//
// The collector closes a connection before it closes the agent's file
// after a goodbye, so this waits (up to 5s) for files still being
// closed (.part) and state saves in flight (.tmp). The collector's
// state file and disk reserve are not listed.
func (rc *realCollector) files(t *testing.T) []string {
	t.Helper()
	var out []string
	testutil.Eventually(t, 5*time.Second, func() error {
		out = out[:0]
		var busy []string
		filepath.WalkDir(rc.dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() && d.Name() == store.RetainDir {
				return filepath.SkipDir // retention's index of closed files
			}
			if err == nil && p != rc.dir && d.Name() != store.StateFile && d.Name() != store.ReserveFile && d.Name() != store.OwnerFile && !index.IsIndex(d.Name()) {
				out = append(out, strings.TrimPrefix(p, rc.dir))
				// A state file being saved is StateFile.tmpNNN until renamed.
				if strings.HasSuffix(p, store.PartSuffix) || strings.Contains(d.Name(), ".tmp") {
					busy = append(busy, d.Name())
				}
			}
			return nil
		})
		if len(busy) > 0 {
			return fmt.Errorf("files still being closed or saved: %q", busy)
		}
		return nil
	})
	return out
}

// replay runs an agent replaying a generated file of n packets with cfg
// (Collector, ReadFile and Logger set here) and returns its summary and
// error; it fails the test if the agent does not end within 20s.
func replay(t *testing.T, cfg Config, n uint64) (Summary, error, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "in.pcap")
	if err := gen.WriteFile(path, gen.FileConfig{Count: n, Mix: gen.MixIMIX}); err != nil {
		t.Fatal(err)
	}
	lb := &testutil.Buffer{}
	cfg.ReadFile, cfg.Logger = path, slog.New(slog.NewTextHandler(lb, nil))
	if cfg.BackoffMax == 0 {
		cfg.BackoffMin, cfg.BackoffMax = 10*time.Millisecond, 50*time.Millisecond
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-runAsync(context.Background(), a):
		if t.Failed() {
			t.Logf("agent log:\n%s", lb.String())
		}
		return r.sum, r.err, lb.String()
	case <-time.After(20 * time.Second):
		t.Fatalf("agent did not end within 20s; log:\n%s", lb.String())
	}
	panic("unreachable")
}

// TestTLSAgent runs the real agent against a real collector over TLS:
// with a good client certificate it delivers; every misconfiguration
// stops it at once with the reason (nothing is retried, nothing is
// written), and the collector counts and logs the refusal.
func TestTLSAgent(t *testing.T) {
	c := pkitest.New(t)
	mutual := startCollector(t, collector.Config{TLS: c.Server(t, true)})
	plain := startCollector(t, collector.Config{Insecure: true})
	goodCert, goodKey := c.Issue(t, c.CA, "web1", pki.Leaf{CommonName: "web1", Client: true})
	foreignCert, foreignKey := c.Issue(t, c.Foreign, "foreign", pki.Leaf{CommonName: "web1", Client: true})
	good := c.Client(t, c.CAFile, goodCert, goodKey, "")

	s, err, _ := replay(t, Config{Collectors: []string{mutual.addr}, Name: "web1", TLS: good}, 1000)
	if err != nil || s.Acked != 1000 || s.Reconnects != 0 {
		t.Fatalf("good agent: %+v, %v", s, err)
	}
	if got := mutual.core.Counters.Packets.Load(); got != 1000 {
		t.Fatalf("collector wrote %d packets, want 1000", got)
	}
	// Inside TLS, --checksum auto leaves the CRC out of every batch.
	if got, want := mutual.core.Counters.Unchecked.Load(), mutual.core.Counters.Batches.Load(); got == 0 || got != want {
		t.Errorf("collector received %d unchecked batches of %d; want all of them (TLS agent, --checksum auto)", got, want)
	}
	// By DNS name, as given with --tls-server-name.
	if s, err, _ := replay(t, Config{Collectors: []string{mutual.addr}, Name: "web1", TLS: c.Client(t, c.CAFile, goodCert, goodKey, pkitest.ServerName)}, 10); err != nil || s.Acked != 10 {
		t.Fatalf("good agent, server name collector.test: %+v, %v", s, err)
	}

	tests := []struct {
		name      string
		coll      *realCollector
		cfg       Config
		want      error
		agentSays string // in the agent's error
		collSays  string // in the collector's log
	}{
		{"client certificate from another CA", mutual, Config{Name: "web1", TLS: c.Client(t, c.CAFile, foreignCert, foreignKey, "")},
			ErrTLS, "the collector refused this agent", "certificate signed by unknown authority"},
		{"no client certificate", mutual, Config{Name: "web1", TLS: c.Client(t, c.CAFile, "", "", "")},
			ErrTLS, "the collector refused this agent", "didn't provide a certificate"},
		{"name is not the certificate's", mutual, Config{Name: "web2", TLS: good},
			ErrRejected, `agent name "web2", certificate CN "web1"`, `agent name \"web2\"`},
		{"collector not trusted", mutual, Config{Name: "web1", TLS: c.Client(t, c.ForeignFile, goodCert, goodKey, "")},
			ErrTLS, "the collector's certificate does not verify", "bad certificate"},
		{"wrong server name", mutual, Config{Name: "web1", TLS: c.Client(t, c.CAFile, goodCert, goodKey, "other.test")},
			ErrTLS, "other.test", "bad certificate"},
		{"plain agent, TLS collector", mutual, Config{Name: "web1", Insecure: true},
			ErrRejected, "requires TLS", "requires TLS"},
		{"TLS agent, plain collector", plain, Config{Name: "web1", TLS: good},
			ErrTLS, "the collector speaks plain TCP", "the agent speaks TLS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rejected := tt.coll.core.Counters.Rejected.Load()
			tt.cfg.Collectors = []string{tt.coll.addr}
			s, err, log := replay(t, tt.cfg, 10)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.agentSays) {
				t.Fatalf("agent: %v; want %v saying %q", err, tt.want, tt.agentSays)
			}
			if s.Reconnects != 0 || s.Acked != 0 {
				t.Errorf("summary %+v: want no retry and nothing acknowledged", s)
			}
			t.Logf("agent: %v", err)
			testutil.EventuallyTrue(t, 5*time.Second, fmt.Sprintf("the collector counted and logged %q", tt.collSays), func() bool {
				return tt.coll.core.Counters.Rejected.Load() > rejected && strings.Contains(tt.coll.log.String(), tt.collSays)
			})
			if strings.Contains(log, "INSECURE") != tt.cfg.Insecure {
				t.Errorf("insecure warning in the agent's log: %v, want %v", !tt.cfg.Insecure, tt.cfg.Insecure)
			}
		})
	}
	if f := plain.files(t); len(f) != 0 {
		t.Errorf("refused agents left files: %q", f)
	}
	// web1's two replays make one file each, or one file when the second
	// connects before the first session ended (it replaces it and goes on
	// writing the same file).
	if f := mutual.files(t); len(f) < 2 || len(f) > 3 || f[0] != "/web1" || !strings.HasPrefix(f[len(f)-1], "/web1/") {
		t.Errorf("collector holds %q, want only web1's directory and its one or two files", f)
	}
}

// TestTokenAgent: the token travels in the hello; a wrong one stops the
// agent with the collector's reason.
func TestTokenAgent(t *testing.T) {
	const token = "agent-test-token-0123456789"
	c := pkitest.New(t)
	coll := startCollector(t, collector.Config{TLS: c.Server(t, false), Token: token})
	cli := c.Client(t, c.CAFile, "", "", "")
	if s, err, _ := replay(t, Config{Collectors: []string{coll.addr}, Name: "tok", TLS: cli, Token: token}, 100); err != nil || s.Acked != 100 {
		t.Fatalf("right token: %+v, %v", s, err)
	}
	s, err, _ := replay(t, Config{Collectors: []string{coll.addr}, Name: "tok2", TLS: cli, Token: token + "x"}, 100)
	if !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "wrong token") || s.Acked != 0 {
		t.Fatalf("wrong token: %+v, %v", s, err)
	}
	if f := coll.files(t); len(f) != 2 {
		t.Fatalf("collector holds %q, want only tok's directory and file", f)
	}
}

func TestConfigNeedsTLSOrInsecure(t *testing.T) {
	cfg := Config{Collectors: []string{"127.0.0.1:1"}, ReadFile: "x", Name: "a"}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "Insecure") {
		t.Fatalf("Validate without TLS or Insecure: %v", err)
	}
	cfg.Insecure = true
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg.Token = strings.Repeat("t", 129)
	if err := cfg.Validate(); err == nil {
		t.Fatal("a 129-byte token was accepted")
	}
	cfg.Token, cfg.Heartbeat, cfg.PeerTimeout = "", 3*time.Second, 3*time.Second
	if err := cfg.Validate(); err == nil {
		t.Fatal("a heartbeat as long as the peer timeout was accepted")
	}
}

// TestNameFromCertificate: without a Name, an agent with a client
// certificate (to the collector, or to the Kafka brokers) takes its CN, or else its first DNS name that is an agent
// name; a certificate that names no agent is an error; a Name given
// stays.
func TestNameFromCertificate(t *testing.T) {
	c := pkitest.New(t)
	host, _ := os.Hostname()
	client := func(file string, l pki.Leaf) Config {
		l.Client = true
		cert, key := c.Issue(t, c.CA, file, l)
		return Config{Collectors: []string{"127.0.0.1:1"}, ReadFile: "x", TLS: c.Client(t, c.CAFile, cert, key, "")}
	}
	named := client("n", pki.Leaf{CommonName: "h1"})
	named.Name = "vm"
	kafkaCert, kafkaKey := c.Issue(t, c.CA, "k", pki.Leaf{CommonName: "k1", Client: true})
	kafka := func(cert, key string) Config {
		return Config{Kafka: &kafkaconn.Config{Brokers: []string{"127.0.0.1:1"}, CertFile: cert, KeyFile: key}, ReadFile: "x"}
	}
	for _, tc := range []struct {
		name    string
		cfg     Config
		want    string
		wantErr string
	}{
		{"CN", client("cn", pki.Leaf{CommonName: "h1", DNSNames: []string{"h1.example"}}), "h1", ""},
		{"CN no agent name: a DNS name", client("dns", pki.Leaf{CommonName: "web server", DNSNames: []string{"bad name", "web-1"}}), "web-1", ""},
		{"names no agent", client("none", pki.Leaf{CommonName: "web server"}), "", `the client certificate names no agent (CN "web server"`},
		{"Name given", named, "vm", ""},
		{"no client certificate", Config{Collectors: []string{"127.0.0.1:1"}, ReadFile: "x", TLS: c.Client(t, c.CAFile, "", "", "")}, host, ""},
		{"Kafka's client certificate", kafka(kafkaCert, kafkaKey), "k1", ""},
		{"Kafka without one", kafka("", ""), host, ""},
		{"Kafka's unreadable", kafka(kafkaCert, kafkaCert), "", "the Kafka client certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := tc.cfg.withDefaults()
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("withDefaults: name %q, err %v; want an error with %q", d.Name, err, tc.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			case d.Name != tc.want:
				t.Errorf("name %q, want %q", d.Name, tc.want)
			}
		})
	}
}
