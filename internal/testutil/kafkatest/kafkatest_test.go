package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestBroker: a record produced with acks from all in-sync replicas
// (franz-go's idempotent default) is consumed back by a consumer group,
// also after the broker was killed and restarted on its log.
func TestBroker(t *testing.T) {
	b := Start(t)
	const topic, n = "kafkatest", 20
	b.CreateTopic(topic, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prod := b.Client(kgo.DefaultProduceTopic(topic))
	for i := range n {
		r := &kgo.Record{Key: []byte(fmt.Sprintf("agent%d", i%4)), Value: []byte(fmt.Sprint(i))}
		if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
	}
	prod.Close()
	consume := func(group string) map[string]bool {
		cl := b.Client(kgo.ConsumeTopics(topic), kgo.ConsumerGroup(group), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		got := map[string]bool{}
		for len(got) < n && ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			if errs := fs.Errors(); len(errs) > 0 && ctx.Err() == nil {
				t.Fatalf("fetch: %v", errs)
			}
			fs.EachRecord(func(r *kgo.Record) { got[string(r.Value)] = true })
		}
		cl.Close()
		return got
	}
	if got := consume("g1"); len(got) != n {
		t.Fatalf("consumed %d distinct records, want %d", len(got), n)
	}
	b.Kill()
	b.Restart()
	if got := consume("g2"); len(got) != n {
		t.Fatalf("after a kill and restart: consumed %d distinct records, want %d", len(got), n)
	}
}

// TestLaunchErrors: what Launch cannot do is an error, never a panic or
// a skip: options that cannot be made into listeners, and a missing
// broker (ErrMissing, which Start turns into a skip).
func TestLaunchErrors(t *testing.T) {
	tests := []struct {
		name string
		libs string // LibsEnv, "" to leave it
		o    Options
		want error
	}{
		{"certificate without key", "", Options{CertFile: "c.pem"}, ErrCertKey},
		{"key without certificate", "", Options{KeyFile: "k.pem"}, ErrCertKey},
		{"client CA without TLS", "", Options{ClientCAFile: "ca.pem"}, ErrClientCANoTLS},
		{"SCRAM syntax", "", Options{SCRAM: []SCRAMUser{{Mechanism: "SCRAM-SHA-256", Name: "a=b", Password: "x"}}}, ErrSCRAMSyntax},
		{"no jars", t.TempDir(), Options{}, ErrMissing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.libs != "" {
				t.Setenv(LibsEnv, tt.libs)
			}
			o := tt.o
			o.Dir = t.TempDir()
			p, err := Launch(o)
			if !errors.Is(err, tt.want) || p != nil {
				if p != nil {
					p.Close()
				}
				t.Fatalf("Launch(%+v) = %v, %v; want nil, %v", o, p, err, tt.want)
			}
			if ents, _ := os.ReadDir(o.Dir); len(ents) != 0 {
				t.Errorf("a failed Launch left %d entries in %s", len(ents), o.Dir)
			}
		})
	}
}

// TestLaunchClose: the core without a testing.TB: Launch starts a JVM
// that answers, Close ends it, removes its directory and frees its
// port.
func TestLaunchClose(t *testing.T) {
	if _, err := Libs(); err != nil {
		Start(t) // skips, or fails under RequireEnv, as every Kafka test does
	}
	dir := t.TempDir()
	p, err := Launch(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	pid := p.PID()
	if pid == 0 {
		p.Close()
		t.Fatal("a launched broker has no process id")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("after Close the broker's JVM (pid %d) is still there: kill 0 = %v", pid, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("Close left %d entries in %s", len(ents), dir)
	}
	ln, err := net.Listen("tcp", p.Addr)
	if err != nil {
		t.Errorf("after Close the broker's address %s cannot be bound: %v", p.Addr, err)
	} else {
		ln.Close()
	}
	if err := p.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}
