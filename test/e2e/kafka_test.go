//go:build linux

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
	"github.com/pcapsync/pcapsync/internal/testutil/kafkatest"
)

// kafkaPipeline is a broker with ingest collectors and writers on it.
type kafkaPipeline struct {
	t      *testing.T
	ctx    context.Context
	broker *kafkatest.Broker
	topic  string
	group  string
	dir    string // the writers' shared root
}

func newKafkaPipeline(t *testing.T, ctx context.Context) *kafkaPipeline {
	t.Helper()
	return &kafkaPipeline{t: t, ctx: ctx, broker: kafkatest.Start(t), topic: "pcap", group: "writers", dir: t.TempDir()}
}

// ingest starts an ingest collector on addr.
func (k *kafkaPipeline) ingest(addr string, extra ...string) *proc {
	k.t.Helper()
	args := append([]string{"collector", "--listen", addr, "--insecure", "--kafka", k.broker.Addr,
		"--kafka-topic", k.topic, "--kafka-partitions", "6"}, withMetrics(k.t, extra)...)
	p := startProc(k.t, k.ctx, "ingest "+addr, "", args...)
	p.waitReady(60 * time.Second)
	return p
}

// writer starts a writer of the group on the shared root.
func (k *kafkaPipeline) writer(name string, extra ...string) *proc {
	k.t.Helper()
	args := append([]string{"writer", "--kafka", k.broker.Addr, "--kafka-topic", k.topic, "--kafka-partitions", "6",
		"--group", k.group, "--dir", k.dir}, withMetrics(k.t, extra)...)
	p := startProc(k.t, k.ctx, "writer "+name, "", args...)
	p.waitReady(60 * time.Second)
	return p
}

// waitCaughtUp waits until the group has committed every record of the
// topic: what the writers acknowledged to Kafka is in files.
func (k *kafkaPipeline) waitCaughtUp(d time.Duration) {
	k.t.Helper()
	cl := k.broker.Client()
	defer cl.Close()
	adm := kadm.NewClient(cl)
	testutil.Eventually(k.t, d, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ends, err := adm.ListEndOffsets(ctx, k.topic)
		if err != nil {
			return fmt.Errorf("listing end offsets: %w", err)
		}
		commits, err := adm.FetchOffsets(ctx, k.group)
		if err != nil {
			return fmt.Errorf("fetching the group's offsets: %w", err)
		}
		var behind int64
		ends.Each(func(o kadm.ListedOffset) {
			c, _ := commits.Lookup(o.Topic, o.Partition)
			behind += max(o.Offset-max(c.At, 0), 0)
		})
		if behind > 0 {
			return fmt.Errorf("the group's commits are %d records behind the topic's end", behind)
		}
		return nil
	})
}

// TestKafkaPipeline: three agents replay reference files through two
// ingest collectors (each agent given both, in different orders) into a
// real Kafka broker; two writers of one group write the files into one
// shared root. Every agent's files hold its reference packets exactly
// once, readable by tshark and capinfos; a writer serves pcapsync query
// (--query-listen) over the shared root, the bytes of a local query.
func TestKafkaPipeline(t *testing.T) {
	requireTools(t, checkTools...)
	ctx := testContext(t)
	k := newKafkaPipeline(t, ctx)
	const count = 50_000
	tmp := t.TempDir()
	addrA := freeport.Addr(t)
	addrB := freeport.Addr(t)
	ingA, ingB := k.ingest(addrA, "--metrics", freeport.Addr(t)), k.ingest(addrB, "--metrics", freeport.Addr(t))
	qaddr := freeport.Addr(t)
	w1 := k.writer("1", "--metrics", freeport.Addr(t), "--query-listen", qaddr, "--insecure")
	w2 := k.writer("2", "--metrics", freeport.Addr(t), "--tap", "127.0.0.1:0")
	mAddrs := []string{metricsAddr(t, ingA), metricsAddr(t, ingB), metricsAddr(t, w1), metricsAddr(t, w2)}
	if _, ok := scrapeMetrics(t, mAddrs[3])["pcapsync_tap_clients_total"]; !ok {
		t.Error("a writer with a tap does not export the tap's metrics")
	}
	orders := []string{addrA + "," + addrB, addrB + "," + addrA, addrA + "," + addrB}
	agents := make([]*proc, 3)
	for i := range agents {
		src := filepath.Join(tmp, fmt.Sprintf("in%d.pcap", i))
		writeGenFile(t, src, gen.FileConfig{Count: count, Mix: gen.MixIMIX, Stream: uint32(100 + i), Seed: uint64(100 + i)})
		agents[i] = startReplay(t, ctx, orders[i], fmt.Sprintf("k%d", i), src) // default batches: the topic pcapsync creates takes them
	}
	for _, a := range agents {
		s := finishReplay(t, a, count, 120*time.Second)
		expectNoReconnects(t, a, s)
	}
	k.waitCaughtUp(60 * time.Second)
	checkKafkaMetrics(t, k, mAddrs[:2], mAddrs[2:], 6)
	checkRemoteQuery(t, ctx, k.dir, qaddr, "--insecure", "--since", "1767225610", "--until", "1767225640", "udp")
	for _, p := range []*proc{ingA, ingB, w1, w2} {
		p.stop(30 * time.Second)
	}
	for _, p := range []*proc{w1, w2} {
		if strings.Contains(p.stderr.String(), "skipping a record") {
			t.Errorf("%s skipped records", p.name)
		}
	}
	for i := range agents {
		r := checkAgentDir(t, filepath.Join(k.dir, fmt.Sprintf("k%d", i)))
		r.expectExactlyOnce(t, fmt.Sprintf("agent k%d", i), map[uint32]uint64{uint32(100 + i): count})
	}
}

// checkRemoteQuery runs a query on the server at addr (query --from,
// with args) and the same one on dir here, and requires the same bytes.
func checkRemoteQuery(t *testing.T, ctx context.Context, dir, addr string, args ...string) {
	t.Helper()
	work := t.TempDir()
	local, remote := filepath.Join(work, "local.pcapng"), filepath.Join(work, "remote.pcapng")
	var sel []string
	for i := 0; i < len(args); i++ { // the selection, without the TLS flags
		switch a := args[i]; {
		case a == "--insecure":
		case a == "--tls-ca" || a == "--tls-cert" || a == "--tls-key" || a == "--token-file":
			i++
		default:
			sel = append(sel, a)
		}
	}
	if code := startProc(t, ctx, "query --dir", "", append([]string{"query", "--dir", dir, "-w", local}, sel...)...).wait(60 * time.Second); code != 0 {
		t.Fatalf("local query exited %d", code)
	}
	if code := startProc(t, ctx, "query --from", "", append([]string{"query", "--from", addr, "-w", remote}, args...)...).wait(60 * time.Second); code != 0 {
		t.Fatalf("remote query exited %d", code)
	}
	l, err := os.ReadFile(local)
	if err != nil {
		t.Fatal(err)
	}
	r, err := os.ReadFile(remote)
	if err != nil {
		t.Fatal(err)
	}
	if len(l) < 10000 || !bytes.Equal(l, r) {
		t.Errorf("remote query: %d bytes; local query: %d bytes; want the same, not almost empty", len(r), len(l))
	}
}
