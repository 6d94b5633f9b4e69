//go:build linux

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/kafkaconn"
	"github.com/pcapsync/pcapsync/internal/pki"
	"github.com/pcapsync/pcapsync/internal/pki/pkitest"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
	"github.com/pcapsync/pcapsync/internal/testutil/kafkatest"
)

// TestKafkaAgentDirect: one agent replays a reference file straight to
// Kafka (pcapsync agent --kafka), another through an ingest collector,
// into one topic; a writer writes both agents' files, each equal to its
// reference packet for packet.
func TestKafkaAgentDirect(t *testing.T) {
	requireTools(t, checkTools...)
	ctx := testContext(t)
	k := newKafkaPipeline(t, ctx)
	const count = 30_000
	tmp := t.TempDir()
	addr := freeport.Addr(t)
	ing := k.ingest(addr)
	w := k.writer("1")
	srcs := make([]string, 2)
	for i := range srcs {
		srcs[i] = filepath.Join(tmp, fmt.Sprintf("in%d.pcap", i))
		writeGenFile(t, srcs[i], gen.FileConfig{Count: count, Mix: gen.MixIMIX, Stream: uint32(200 + i), Seed: uint64(200 + i)})
	}
	direct := startProc(t, ctx, "agent direct", "", "agent", "--kafka", k.broker.Addr, "--kafka-topic", k.topic,
		"--kafka-partitions", "6", "--name", "direct", "--read", srcs[0])
	viaIngest := startReplay(t, ctx, addr, "via-ingest", srcs[1])
	for _, a := range []*proc{direct, viaIngest} {
		s := finishReplay(t, a, count, 120*time.Second)
		expectNoReconnects(t, a, s)
	}
	k.waitCaughtUp(60 * time.Second)
	ing.stop(30 * time.Second)
	w.stop(30 * time.Second)
	if strings.Contains(w.stderr.String(), "skipping a record") {
		t.Errorf("the writer refused records signed with the record key:\n%s", w.stderr.String())
	}
	if strings.Contains(w.stderr.String(), "skipping a record") {
		t.Errorf("the writer skipped records")
	}
	for i, name := range []string{"direct", "via-ingest"} {
		r := checkAgentDir(t, filepath.Join(k.dir, name))
		r.expectExactlyOnce(t, "agent "+name, map[uint32]uint64{uint32(200 + i): count})
	}
}

// TestKafkaSecureCLI: an agent producing straight to Kafka with its own
// record key (gen kafka-agent-key), an ingest collector and a writer
// with the topic's, all on the broker's SASL_SSL listener with TLS (a
// CA, a client certificate) and SCRAM-SHA-512, move every packet into
// files; an agent refuses another agent's key at start; an agent with a wrong password exits non-zero at once,
// saying SASL authentication failed.
func TestKafkaSecureCLI(t *testing.T) {
	requireTools(t, checkTools...)
	ctx := testContext(t)
	p := pkitest.New(t)
	cert, key := p.Issue(t, p.CA, "kafka-client", pki.Leaf{CommonName: "kafka-client", Client: true})
	pass := filepath.Join(p.Dir, "alice.pass")
	wrong := filepath.Join(p.Dir, "wrong.pass")
	recordKey := filepath.Join(p.Dir, "record.key")
	for f, v := range map[string]string{pass: "alice-secret\n", wrong: "not-alices\n", recordKey: "a-record-key-of-the-site-0123456789\n"} {
		if err := os.WriteFile(f, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	b := kafkatest.StartWith(t, kafkatest.Options{CertFile: p.ServerCert, KeyFile: p.ServerKey, ClientCAFile: p.CAFile,
		SCRAM: []kafkatest.SCRAMUser{{Mechanism: kafkaconn.SCRAMSHA512, Name: "alice", Password: "alice-secret"}}})
	k := &kafkaPipeline{t: t, ctx: ctx, broker: b, topic: "secure", group: "writers", dir: t.TempDir()}
	secureKey := func(passFile, keyFile string) []string {
		return []string{"--kafka", b.SASLAddr, "--kafka-topic", k.topic, "--kafka-partitions", "3",
			"--kafka-tls", "--kafka-tls-ca", p.CAFile, "--kafka-tls-cert", cert, "--kafka-tls-key", key,
			"--kafka-sasl", "SCRAM-SHA-512", "--kafka-user", "alice", "--kafka-password-file", passFile,
			"--kafka-record-key", keyFile}
	}
	secure := func(passFile string) []string { return secureKey(passFile, recordKey) }
	// The agent writing straight to Kafka holds its own key, not the
	// topic's; an agent of another name refuses it at start.
	directKey := filepath.Join(p.Dir, "direct.key")
	cmdOut(t, pcapsyncBin, "gen", "kafka-agent-key", "--kafka-record-key", recordKey, "--agent", "direct", "--out", directKey)
	other := startProc(t, ctx, "agent with another's key", "", append([]string{"agent", "--name", "other", "--read", "/dev/null"}, secureKey(pass, directKey)...)...)
	if code := other.wait(60 * time.Second); code == 0 || !strings.Contains(other.stderr.String(), `agent "direct"'s record key`) {
		t.Fatalf("an agent with another agent's record key exited %d:\n%s", code, other.stderr.String())
	}
	const count = 20_000
	tmp := t.TempDir()
	srcs := make([]string, 2)
	for i := range srcs {
		srcs[i] = filepath.Join(tmp, fmt.Sprintf("in%d.pcap", i))
		writeGenFile(t, srcs[i], gen.FileConfig{Count: count, Mix: gen.MixIMIX, Stream: uint32(300 + i), Seed: uint64(300 + i)})
	}

	// The refusal first: nothing else is on the broker yet.
	start := time.Now()
	refused := startProc(t, ctx, "agent refused", "", append([]string{"agent", "--name", "refused", "--read", srcs[0]}, secure(wrong)...)...)
	if code := refused.wait(60 * time.Second); code == 0 {
		t.Fatalf("an agent with a wrong SASL password exited 0")
	}
	msg := refused.stderr.String()
	if !strings.Contains(msg, "SASL") || !strings.Contains(strings.ToLower(msg), "authentication") {
		t.Fatalf("an agent with a wrong SASL password says:\n%s\nwant a message naming SASL authentication", msg)
	}
	t.Logf("refused in %v", time.Since(start).Round(time.Millisecond))

	addr := freeport.Addr(t)
	ing := startProc(t, ctx, "ingest", "", append([]string{"collector", "--listen", addr, "--insecure"}, withMetrics(t, secure(pass))...)...)
	ing.waitReady(60 * time.Second)
	w := startProc(t, ctx, "writer", "", append([]string{"writer", "--group", k.group, "--dir", k.dir}, withMetrics(t, secure(pass))...)...)
	w.waitReady(60 * time.Second)
	direct := startProc(t, ctx, "agent direct", "", append([]string{"agent", "--name", "direct", "--read", srcs[0]}, secureKey(pass, directKey)...)...)
	viaIngest := startReplay(t, ctx, addr, "via-ingest", srcs[1])
	for _, a := range []*proc{direct, viaIngest} {
		finishReplay(t, a, count, 120*time.Second)
	}
	k.waitCaughtUp(60 * time.Second)
	ing.stop(30 * time.Second)
	w.stop(30 * time.Second)
	if strings.Contains(w.stderr.String(), "skipping a record") {
		t.Errorf("the writer refused records signed with the record key:\n%s", w.stderr.String())
	}
	for i, name := range []string{"direct", "via-ingest"} {
		r := checkAgentDir(t, filepath.Join(k.dir, name))
		r.expectExactlyOnce(t, "agent "+name, map[uint32]uint64{uint32(300 + i): count})
	}
}
