package redisbench

import (
	"bytes"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/pcapsync/pcapsync/internal/redisfeed/redistest"
	"github.com/pcapsync/pcapsync/wirecompare"
)

func client(tb testing.TB) *redis.Client {
	tb.Helper()
	srv := redistest.Start(tb)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, DisableIdentity: true})
	tb.Cleanup(func() { c.Close() })
	return c
}

// TestRun: a small run measures every payload and codec, gets back what
// it stored, and compresses the text payloads.
func TestRun(t *testing.T) {
	res, err := Run(t.Context(), client(t), Config{Ops: 20, Entries: 500}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 5*len(Codecs) {
		t.Fatalf("%d results, want %d", len(res), 5*len(Codecs))
	}
	for _, r := range res {
		switch {
		case r.Codec == "raw" && r.Stored != r.Raw:
			t.Errorf("%s raw: %d bytes stored for %d", r.Payload, r.Stored, r.Raw)
		case r.Codec != "raw" && r.Payload == "json-log-20" && r.Ratio() > 0.8:
			t.Errorf("%s %s: ratio %.2f", r.Payload, r.Codec, r.Ratio())
		case r.Pipe[0] <= 0 || r.Seq[2] < r.Seq[0] || r.StreamMem <= 0 || r.KeyMem <= 0:
			t.Errorf("%s %s: implausible %+v", r.Payload, r.Codec, r)
		}
	}
	var b bytes.Buffer
	Markdown(&b, res)
	if n := strings.Count(b.String(), "\n"); n != len(res)+2 {
		t.Errorf("table of %d lines:\n%s", n, b.String())
	}
}

// BenchmarkRoundTrip: one full round trip per op, per payload, codec and
// mode, with its percentiles.
func BenchmarkRoundTrip(b *testing.B) {
	rdb := client(b)
	samples, err := wirecompare.DictSamples(wirecompare.Mixed, 500)
	if err != nil {
		b.Fatal(err)
	}
	all, err := wirecompare.Compressors(samples)
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range []payload{newPackets(wirecompare.Mixed, 64), newJSONLog(20)} {
		for _, c := range all {
			if !containsName(c.Name()) {
				continue
			}
			for _, mode := range []string{"4rtt", "pipelined"} {
				b.Run(p.name()+"/"+CodecName(c.Name())+"/"+mode, func(b *testing.B) {
					rt := &roundTrip{rdb: rdb, p: p, c: c, key: "bench:" + b.Name()}
					b.ReportAllocs()
					for i := 0; b.Loop(); i++ {
						if err := rt.do(b.Context(), i, mode == "pipelined"); err != nil {
							b.Fatal(err)
						}
						b.SetBytes(int64(rt.raw))
					}
					b.ReportMetric(float64(rt.stored)/float64(rt.raw), "ratio")
				})
			}
		}
	}
}

func containsName(n string) bool {
	for _, c := range Codecs {
		if c == n {
			return true
		}
	}
	return false
}
