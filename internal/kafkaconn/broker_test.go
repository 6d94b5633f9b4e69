package kafkaconn

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcapsync/pcapsync/internal/pki"
	"github.com/pcapsync/pcapsync/internal/pki/pkitest"
	"github.com/pcapsync/pcapsync/internal/testutil/kafkatest"
)

// opTimeout bounds each operation against the broker.
const opTimeout = 30 * time.Second

// secureBroker is one real broker with every listener the tests need:
// PLAINTEXT, SSL requiring client certificates of p.CA, SASL_SSL with
// SCRAM users alice (SHA-512), bob (SHA-256) and carol (SHA-512, not
// allowed to do anything: authorization is on).
type secureBroker struct {
	*kafkatest.Broker
	p                     *pkitest.PKI
	clientCert, clientKey string
	pass                  map[string]string // user -> password file
}

func startSecure(t *testing.T) *secureBroker {
	t.Helper()
	p := pkitest.New(t)
	s := &secureBroker{p: p, pass: map[string]string{}}
	s.clientCert, s.clientKey = p.Issue(t, p.CA, "writer", pki.Leaf{CommonName: "writer", Client: true})
	var users []kafkatest.SCRAMUser
	for _, u := range []kafkatest.SCRAMUser{
		{Mechanism: SCRAMSHA512, Name: "alice", Password: "alice-secret"},
		{Mechanism: SCRAMSHA256, Name: "bob", Password: "bob-secret"},
		{Mechanism: SCRAMSHA512, Name: "carol", Password: "carol-secret"},
	} {
		users = append(users, u)
		s.pass[u.Name] = writeFile(t, p.Dir, u.Name+".pass", u.Password+"\n")
	}
	start := time.Now()
	s.Broker = kafkatest.StartWith(t, kafkatest.Options{
		CertFile: p.ServerCert, KeyFile: p.ServerKey, ClientCAFile: p.CAFile,
		SCRAM:      users,
		SuperUsers: []string{"User:alice", "User:bob", "User:CN=writer,O=pcapsync"},
	})
	t.Logf("broker started in %v", time.Since(start).Round(time.Millisecond))
	return s
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	f := filepath.Join(dir, name)
	if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func opCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	t.Cleanup(cancel)
	return ctx
}

func newClient(t *testing.T, c Config, extra ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := c.NewClient(extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// roundTrip creates c's topic through EnsureTopic, produces one record
// through a client of c.Opts and consumes it back through another.
func roundTrip(t *testing.T, c Config) {
	t.Helper()
	ctx := opCtx(t)
	cl := newClient(t, c)
	created, err := EnsureTopic(ctx, cl, c)
	if err != nil || !created {
		t.Fatalf("EnsureTopic of a new topic: created %v, %v", created, err)
	}
	if created, err := EnsureTopic(ctx, cl, c); err != nil || created {
		t.Fatalf("EnsureTopic of an existing topic: created %v, %v", created, err)
	}
	want := &kgo.Record{Topic: c.Topic, Key: []byte("web1"), Value: []byte("batch over " + t.Name())}
	if err := cl.ProduceSync(ctx, want).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	cons := newClient(t, c, kgo.ConsumeTopics(c.Topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	for ctx.Err() == nil {
		fs := cons.PollFetches(ctx)
		if errs := fs.Errors(); len(errs) > 0 && ctx.Err() == nil {
			t.Fatalf("fetch: %v", errs)
		}
		for _, r := range fs.Records() {
			if !bytes.Equal(r.Key, want.Key) || !bytes.Equal(r.Value, want.Value) {
				t.Fatalf("consumed %q=%q, want %q=%q", r.Key, r.Value, want.Key, want.Value)
			}
			return
		}
	}
	t.Fatalf("no record consumed within %v", opTimeout)
}

// TestBroker runs against one real broker (plain, TLS with client
// certificates, SASL_SSL with SCRAM): a record goes through every way
// of connecting; refusals say why; topics are created once; the
// topic's record limit is what the broker enforces.
func TestBroker(t *testing.T) {
	s := startSecure(t)
	tlsCfg := func(topic string) Config {
		return Config{Brokers: []string{s.TLSAddr}, Topic: topic, CAFile: s.p.CAFile, CertFile: s.clientCert, KeyFile: s.clientKey}
	}
	saslCfg := func(topic, mech, user string) Config {
		return Config{Brokers: []string{s.SASLAddr}, Topic: topic, CAFile: s.p.CAFile, SASL: mech, User: user, PasswordFile: s.pass[user]}
	}

	t.Run("round trips", func(t *testing.T) {
		for _, tt := range []struct {
			name string
			cfg  Config
		}{
			{"plain", Config{Brokers: []string{s.Addr}, Topic: "plain"}},
			{"tls", tlsCfg("tls")},
			{"tls server name", func() Config {
				c := tlsCfg("tls-name")
				c.ServerName = pkitest.ServerName
				return c
			}()},
			{"scram-sha-512", saslCfg("sasl512", SCRAMSHA512, "alice")},
			{"scram-sha-256", saslCfg("sasl256", "scram-sha-256", "bob")},
		} {
			t.Run(tt.name, func(t *testing.T) {
				start := time.Now()
				roundTrip(t, tt.cfg)
				t.Logf("%v", time.Since(start).Round(time.Millisecond))
			})
		}
	})

	t.Run("refusals", func(t *testing.T) {
		wrongPass := saslCfg("refused", SCRAMSHA512, "alice")
		wrongPass.PasswordFile = writeFile(t, t.TempDir(), "wrong", "not-alices\n")
		wrongMech := saslCfg("refused", SCRAMSHA256, "alice") // alice has SHA-512 credentials only
		foreignCA := tlsCfg("refused")
		foreignCA.CAFile = s.p.ForeignFile
		wrongName := tlsCfg("refused")
		wrongName.ServerName = "other.example"
		noClientCert := tlsCfg("refused")
		noClientCert.CertFile, noClientCert.KeyFile = "", ""
		forbidden := saslCfg("refused", SCRAMSHA512, "carol")
		tooMany := Config{Brokers: []string{s.Addr}, Topic: "three-replicas", Replication: 3}
		for _, tt := range []struct {
			name string
			cfg  Config
			is   func(error) bool
			want string // in the message
		}{
			{"wrong password", wrongPass, isErr(kerr.SaslAuthenticationFailed), "invalid credentials"},
			{"mechanism without credentials", wrongMech, isErr(kerr.SaslAuthenticationFailed), "SCRAM-SHA-256"},
			{"untrusted CA", foreignCA, isAs[x509.UnknownAuthorityError], "unknown authority"},
			{"wrong server name", wrongName, isAs[x509.HostnameError], "other.example"},
			{"no client certificate", noClientCert, func(error) bool { return true }, "bad certificate"},
			{"not authorized", forbidden, isErr(ErrNotAuthorized), "TOPIC_AUTHORIZATION_FAILED"},
			{"more replicas than brokers", tooMany, isErr(kerr.InvalidReplicationFactor), "replication 3"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				cl := newClient(t, tt.cfg)
				start := time.Now()
				_, err := EnsureTopic(opCtx(t), cl, tt.cfg)
				t.Logf("%v: %v", time.Since(start).Round(time.Millisecond), err)
				if err == nil || !tt.is(err) || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("EnsureTopic: %v, want an error of the right kind containing %q", err, tt.want)
				}
				if errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("EnsureTopic waited for its deadline instead of reporting the refusal: %v", err)
				}
			})
		}
	})

	t.Run("max record bytes", func(t *testing.T) {
		ctx := opCtx(t)
		const limit = 2 << 20
		adm := kadm.NewClient(s.Client())
		v := "2097152"
		if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": &v}, "big"); err != nil {
			t.Fatal(err)
		}
		c := Config{Brokers: []string{s.Addr}, Topic: "big"}
		// The producer's own limit above the topic's: the broker decides.
		cl := newClient(t, c, kgo.ProducerBatchMaxBytes(2*limit), kgo.ProducerBatchCompression(kgo.NoCompression()))
		if created, err := EnsureTopic(ctx, cl, c); err != nil || created {
			t.Fatalf("EnsureTopic of a topic made elsewhere: created %v, %v", created, err)
		}
		got, err := MaxRecordBytes(ctx, cl, "big")
		if err != nil || got != limit {
			t.Fatalf("MaxRecordBytes = %d, %v; want %d", got, err, limit)
		}
		key := []byte("web1")
		fits := &kgo.Record{Topic: "big", Key: key, Value: random(limit - RecordOverhead - len(key))}
		if err := cl.ProduceSync(ctx, fits).FirstErr(); err != nil {
			t.Fatalf("a record of MaxRecordBytes-RecordOverhead: %v", err)
		}
		tooBig := &kgo.Record{Topic: "big", Key: key, Value: random(limit)}
		if err := cl.ProduceSync(ctx, tooBig).FirstErr(); !errors.Is(err, kerr.MessageTooLarge) {
			t.Fatalf("a record of MaxRecordBytes: %v, want the broker's MESSAGE_TOO_LARGE", err)
		}
		// A topic EnsureTopic creates takes CreatedMaxMessageBytes; one
		// created without its own limit has the broker's (Kafka's
		// default message.max.bytes).
		if _, err := EnsureTopic(ctx, cl, Config{Topic: "ours"}); err != nil {
			t.Fatal(err)
		}
		if got, err := MaxRecordBytes(ctx, cl, "ours"); err != nil || got != CreatedMaxMessageBytes {
			t.Fatalf("MaxRecordBytes of a topic EnsureTopic created = %d, %v; want %d", got, err, CreatedMaxMessageBytes)
		}
		if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, -1, nil, "small"); err != nil {
			t.Fatal(err)
		}
		if got, err := MaxRecordBytes(ctx, cl, "small"); err != nil || got != 1048588 {
			t.Fatalf("MaxRecordBytes of a topic with the broker's default = %d, %v; want 1048588", got, err)
		}
		// The fallback for brokers whose topics do not report the
		// setting (Kafka's always do).
		if got, err := brokerMaxRecordBytes(ctx, kadm.NewClient(cl)); err != nil || got != 1048588 {
			t.Fatalf("the brokers' message.max.bytes = %d, %v; want 1048588", got, err)
		}
		// An absent topic is asked about again (it may be one just
		// created) until the context ends.
		short, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if _, err := MaxRecordBytes(short, cl, "absent"); !errors.Is(err, kerr.UnknownTopicOrPartition) {
			t.Fatalf("MaxRecordBytes of an absent topic: %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
		}
	})

	// Last, as it stops the broker: EnsureTopic started while the broker
	// is down waits for it to come back (Restart takes seconds: without
	// the wait, EnsureTopic would fail at once with a refused
	// connection).
	c := Config{Brokers: []string{s.Addr}, Topic: "after-restart"}
	cl := newClient(t, c)
	s.Stop()
	type result struct {
		created bool
		err     error
	}
	done := make(chan result, 1)
	go func() {
		created, err := EnsureTopic(opCtx(t), cl, c)
		done <- result{created, err}
	}()
	start := time.Now()
	s.Restart()
	t.Logf("broker restarted in %v", time.Since(start).Round(time.Millisecond))
	if r := <-done; r.err != nil || !r.created {
		t.Fatalf("EnsureTopic across a broker restart: created %v, %v", r.created, r.err)
	}
	t.Logf("EnsureTopic across a broker restart: %v", time.Since(start).Round(time.Millisecond))
}

// TestUnreachable: with no broker listening, EnsureTopic keeps trying
// until its context ends, and then says what it last got.
func TestUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := Config{Brokers: []string{addr}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = EnsureTopic(ctx, newClient(t, c), c)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("EnsureTopic with no broker: %v, want the deadline and the refused connection", err)
	}
	t.Log(err)
}

func isErr(target error) func(error) bool {
	return func(err error) bool { return errors.Is(err, target) }
}

func isAs[T error](err error) bool {
	_, ok := errors.AsType[T](err)
	return ok
}

func random(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}
