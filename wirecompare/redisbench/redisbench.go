// Package redisbench measures the Redis pipeline of the collector's live
// feed against the reference write-up's (shared/BACKGROUND.md, idea 4):
// payloads encoded, compressed (raw, snappy, s2, zstd), stored with SET
// and XADD, read back with GET and XREAD, decompressed and decoded, on
// real-looking packet batches and on JSON log lines.
//
// For each payload and codec it reports the compression ratio
// (compressed / raw, lower is better, as the write-up quotes it), the
// time to compress and decompress one payload, the latency of one full
// round trip at P50/P95/P99 with four round trips to Redis (SET, XADD,
// GET, XREAD one after the other) and with all four in one pipelined
// round trip, and Redis's used_memory grown per byte stored, for
// entries of one stream and for plain keys.
package redisbench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pcapsync/pcapsync/internal/wire"
	"github.com/pcapsync/pcapsync/wirecompare"
)

// Config sizes a run. Zero fields mean the defaults in brackets.
type Config struct {
	Ops     int // round trips measured per payload, codec and mode [2000]
	Entries int // entries stored for the memory figures [2000]
	Records int // packets per batch [64]
	// JSONLines are the sizes of the JSON log payloads, in lines of
	// about 300 bytes [1, 5, 20].
	JSONLines []int
}

func (c *Config) defaults() {
	if c.Ops == 0 {
		c.Ops = 2000
	}
	if c.Entries == 0 {
		c.Entries = 2000
	}
	if c.Records == 0 {
		c.Records = 64
	}
	if len(c.JSONLines) == 0 {
		c.JSONLines = []int{1, 5, 20}
	}
}

// Codecs are the compressors measured, by their names in package bench,
// in report order; Name gives the report's name.
var Codecs = []string{"none", "snappy", "s2", "zstd-default"}

// CodecName is the report's name of a package bench compressor.
func CodecName(c string) string {
	switch c {
	case "none":
		return "raw"
	case "zstd-default":
		return "zstd"
	}
	return c
}

// Result is one payload with one codec.
type Result struct {
	Payload, Codec string
	Raw, Stored    int           // bytes of one payload, raw and compressed (mean)
	Compress       time.Duration // median time to compress one payload
	Decompress     time.Duration // median time to decompress one payload
	Seq, Pipe      [3]time.Duration
	// StreamMem and KeyMem are used_memory grown per byte of payload
	// stored, as stream entries and as keys.
	StreamMem, KeyMem float64
}

// Ratio is compressed / raw.
func (r *Result) Ratio() float64 { return float64(r.Stored) / float64(r.Raw) }

// payload is a kind of data: it makes the i-th value and can encode
// and decode it.
type payload interface {
	name() string
	encode(dst []byte, i int) []byte // the i-th payload, encoded
	decode(p []byte) error           // decode and check p
}

// Run measures every payload with every codec against rdb, which it
// empties (FLUSHALL) between measurements: give it a Redis of its own.
func Run(ctx context.Context, rdb *redis.Client, cfg Config, progress io.Writer) ([]Result, error) {
	cfg.defaults()
	samples, err := wirecompare.DictSamples(wirecompare.Mixed, 2000)
	if err != nil {
		return nil, err
	}
	all, err := wirecompare.Compressors(samples)
	if err != nil {
		return nil, err
	}
	payloads := []payload{newPackets(wirecompare.Mixed, cfg.Records), newPackets(wirecompare.Text, cfg.Records)}
	for _, n := range cfg.JSONLines {
		payloads = append(payloads, newJSONLog(n))
	}
	var res []Result
	for _, p := range payloads {
		for _, name := range Codecs {
			i := slices.IndexFunc(all, func(c wirecompare.Compressor) bool { return c.Name() == name })
			r, err := measure(ctx, rdb, cfg, p, all[i])
			if err != nil {
				return res, fmt.Errorf("%s %s: %w", p.name(), name, err)
			}
			if progress != nil {
				fmt.Fprintf(progress, "%s %s: ratio %.2f, pipelined p50 %v\n", r.Payload, r.Codec, r.Ratio(), r.Pipe[0])
			}
			res = append(res, r)
		}
	}
	return res, nil
}

// measure runs one payload and codec.
func measure(ctx context.Context, rdb *redis.Client, cfg Config, p payload, c wirecompare.Compressor) (Result, error) {
	r := Result{Payload: p.name(), Codec: CodecName(c.Name())}
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		return r, err
	}
	rt := &roundTrip{rdb: rdb, p: p, c: c, key: "bench:" + r.Payload + ":" + r.Codec}
	var comp, decomp []time.Duration
	var raw, stored int
	for _, pipelined := range []bool{false, true} {
		var lat []time.Duration
		for i := range cfg.Ops {
			start := time.Now()
			if err := rt.do(ctx, i, pipelined); err != nil {
				return r, err
			}
			lat = append(lat, time.Since(start))
			comp, decomp = append(comp, rt.comp), append(decomp, rt.decomp)
			raw, stored = raw+rt.raw, stored+rt.stored
		}
		q := percentiles(lat)
		if pipelined {
			r.Pipe = q
		} else {
			r.Seq = q
		}
	}
	r.Raw, r.Stored = raw/(2*cfg.Ops), stored/(2*cfg.Ops)
	r.Compress, r.Decompress = percentiles(comp)[0], percentiles(decomp)[0]
	var err error
	if r.StreamMem, err = memory(ctx, rdb, rt, cfg.Entries, true); err != nil {
		return r, err
	}
	if r.KeyMem, err = memory(ctx, rdb, rt, cfg.Entries, false); err != nil {
		return r, err
	}
	return r, nil
}

// roundTrip is one payload's trip through Redis and back.
type roundTrip struct {
	rdb    *redis.Client
	p      payload
	c      wirecompare.Compressor
	key    string
	lastID string

	enc, zbuf, dbuf []byte

	// of the last do
	comp, decomp time.Duration
	raw, stored  int
}

// do encodes and compresses payload i, SETs it and XADDs it, GETs and
// XREADs it back, and decompresses and decodes both copies: with
// pipelined, the four commands go in one round trip, else in four.
func (rt *roundTrip) do(ctx context.Context, i int, pipelined bool) error {
	rt.enc = rt.p.encode(rt.enc[:0], i)
	t0 := time.Now()
	z, err := rt.c.Compress(rt.zbuf, rt.enc)
	if err != nil {
		return err
	}
	rt.comp = time.Since(t0)
	rt.zbuf, rt.raw, rt.stored = z, len(rt.enc), len(z)
	prev := rt.lastID
	if prev == "" {
		prev = "0-0"
	}
	add := &redis.XAddArgs{Stream: rt.key + ":s", MaxLen: 1000, Approx: true, Values: []any{"d", z}}
	read := &redis.XReadArgs{Streams: []string{rt.key + ":s", prev}, Count: 1, Block: -1}
	var got, entry string
	if pipelined {
		cmds, err := rt.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, rt.key, z, 0)
			p.XAdd(ctx, add)
			p.Get(ctx, rt.key)
			p.XRead(ctx, read)
			return nil
		})
		if err != nil {
			return err
		}
		rt.lastID = cmds[1].(*redis.StringCmd).Val()
		got = cmds[2].(*redis.StringCmd).Val()
		entry, err = xreadValue(cmds[3].(*redis.XStreamSliceCmd).Val())
		if err != nil {
			return err
		}
	} else {
		if err := rt.rdb.Set(ctx, rt.key, z, 0).Err(); err != nil {
			return err
		}
		if rt.lastID, err = rt.rdb.XAdd(ctx, add).Result(); err != nil {
			return err
		}
		if got, err = rt.rdb.Get(ctx, rt.key).Result(); err != nil {
			return err
		}
		st, err := rt.rdb.XRead(ctx, read).Result()
		if err != nil {
			return err
		}
		if entry, err = xreadValue(st); err != nil {
			return err
		}
	}
	for _, v := range []string{got, entry} {
		t0 := time.Now()
		d, err := rt.c.Decompress(rt.dbuf, []byte(v), len(rt.enc))
		if err != nil {
			return err
		}
		rt.decomp = time.Since(t0)
		rt.dbuf = d
		if !bytes.Equal(d, rt.enc) {
			return fmt.Errorf("payload %d came back different", i)
		}
		if err := rt.p.decode(d); err != nil {
			return err
		}
	}
	return nil
}

func xreadValue(st []redis.XStream) (string, error) {
	if len(st) != 1 || len(st[0].Messages) != 1 {
		return "", fmt.Errorf("XREAD returned %v", st)
	}
	v, _ := st[0].Messages[0].Values["d"].(string)
	return v, nil
}

// memory stores n compressed payloads (as entries of one stream, or as
// n keys) into an empty Redis and returns used_memory grown per byte
// stored.
func memory(ctx context.Context, rdb *redis.Client, rt *roundTrip, n int, stream bool) (float64, error) {
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		return 0, err
	}
	before, err := usedMemory(ctx, rdb)
	if err != nil {
		return 0, err
	}
	stored := 0
	pipe := rdb.Pipeline()
	for i := range n {
		enc := rt.p.encode(nil, i)
		z, err := rt.c.Compress(nil, enc)
		if err != nil {
			return 0, err
		}
		stored += len(z)
		if stream {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: rt.key + ":mem", Values: []any{"d", z}})
		} else {
			pipe.Set(ctx, rt.key+":"+strconv.Itoa(i), z, 0)
		}
		if i%100 == 99 || i == n-1 {
			if _, err := pipe.Exec(ctx); err != nil {
				return 0, err
			}
		}
	}
	after, err := usedMemory(ctx, rdb)
	if err != nil {
		return 0, err
	}
	return float64(after-before) / float64(stored), nil
}

func usedMemory(ctx context.Context, rdb *redis.Client) (int64, error) {
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("INFO memory without used_memory")
}

// percentiles returns P50, P95 and P99 of d (sorted in place).
func percentiles(d []time.Duration) [3]time.Duration {
	slices.Sort(d)
	at := func(p float64) time.Duration { return d[min(len(d)-1, int(p*float64(len(d))))] }
	return [3]time.Duration{at(0.50), at(0.95), at(0.99)}
}

// packets is wire batches of generated traffic: the records section of
// a batch, as the feed compresses it.
type packets struct {
	kind    wirecompare.Traffic
	batches []wirecompare.Batch
	e       wire.BatchEncoder
}

func newPackets(kind wirecompare.Traffic, records int) *packets {
	p := &packets{kind: kind}
	all, _ := wirecompare.Generate(kind, 64*records, 99) // kind is known: no error
	for i := 0; i < len(all.Records); i += records {
		p.batches = append(p.batches, wirecompare.Batch{Source: all.Source, Records: all.Records[i : i+records]})
	}
	return p
}

func (p *packets) name() string { return "packets-" + string(p.kind) }

func (p *packets) encode(dst []byte, i int) []byte {
	p.e.Reset(nil)
	for _, r := range p.batches[i%len(p.batches)].Records {
		p.e.Append(r.Timestamp, r.IfIndex, r.OrigLen, r.Data)
	}
	return append(dst, p.e.Records()...)
}

func (p *packets) decode(recs []byte) error {
	b := wire.Batch{Count: uint32(len(p.batches[0].Records)), RawLen: uint32(len(recs)), Records: recs}
	return b.Validate(2)
}

// jsonLog is JSON log lines as a service writes them, a batch of lines
// per payload: the reference write-up's kind of payload.
type jsonLog struct {
	lines int
	rng   *rand.Rand
	line  logLine // decoded into
}

type logLine struct {
	Time      string  `json:"time"`
	Level     string  `json:"level"`
	Service   string  `json:"service"`
	Msg       string  `json:"msg"`
	Method    string  `json:"method"`
	Path      string  `json:"path"`
	Status    int     `json:"status"`
	LatencyMS float64 `json:"latency_ms"`
	UserID    int     `json:"user_id"`
	TraceID   string  `json:"trace_id"`
	UserAgent string  `json:"user_agent"`
}

func newJSONLog(lines int) *jsonLog {
	return &jsonLog{lines: lines, rng: rand.New(rand.NewPCG(7, 7))}
}

func (j *jsonLog) name() string { return fmt.Sprintf("json-log-%d", j.lines) }

var (
	logPaths  = []string{"/api/v1/users/%d", "/api/v1/orders/%d/items", "/api/v1/search?q=item%d", "/healthz", "/api/v1/cart/%d"}
	logMsgs   = []string{"request handled", "request handled", "cache miss", "slow query", "upstream timeout"}
	logLevels = []string{"info", "info", "info", "warn", "error"}
	logAgents = []string{"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36", "curl/8.5.0", "okhttp/4.12.0"}
)

func (j *jsonLog) encode(dst []byte, i int) []byte {
	rng := j.rng
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Second)
	for k := range j.lines {
		m := rng.IntN(len(logMsgs))
		var tid [16]byte
		for b := range tid {
			tid[b] = byte(rng.Uint32())
		}
		path := logPaths[rng.IntN(len(logPaths))]
		if strings.Contains(path, "%d") {
			path = fmt.Sprintf(path, rng.IntN(100000))
		}
		line := logLine{
			Time: base.Add(time.Duration(k) * 37 * time.Millisecond).Format(time.RFC3339Nano), Level: logLevels[m],
			Service: "checkout-api", Msg: logMsgs[m], Method: []string{"GET", "POST"}[rng.IntN(2)], Path: path,
			Status: []int{200, 200, 200, 404, 500}[m], LatencyMS: float64(rng.IntN(50000)) / 100, UserID: rng.IntN(1000000),
			TraceID: fmt.Sprintf("%x", tid), UserAgent: logAgents[rng.IntN(len(logAgents))],
		}
		b, _ := json.Marshal(line) // plain struct: cannot fail
		dst = append(append(dst, b...), '\n')
	}
	return dst
}

func (j *jsonLog) decode(p []byte) error {
	d := json.NewDecoder(bytes.NewReader(p))
	for n := 0; ; n++ {
		if err := d.Decode(&j.line); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("json log line %d: %w", n, err)
		}
	}
}

// Markdown writes results as a table.
func Markdown(w io.Writer, res []Result) {
	fmt.Fprintln(w, "| payload | codec | bytes raw → stored | ratio | compress | decompress | 4 round trips P50 / P95 / P99 | pipelined P50 / P95 / P99 | used_memory per byte, stream / keys |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, r := range res {
		fmt.Fprintf(w, "| %s | %s | %d → %d | %.2f | %s | %s | %s | %s | %.2f / %.2f |\n",
			r.Payload, r.Codec, r.Raw, r.Stored, r.Ratio(), us(r.Compress), us(r.Decompress),
			usList(r.Seq), usList(r.Pipe), r.StreamMem, r.KeyMem)
	}
}

func us(d time.Duration) string { return fmt.Sprintf("%.1f µs", float64(d)/1e3) }

func usList(d [3]time.Duration) string {
	return fmt.Sprintf("%.0f / %.0f / %.0f µs", float64(d[0])/1e3, float64(d[1])/1e3, float64(d[2])/1e3)
}
