package correlate

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"
)

// ev is a packet as a matcher test gives it: agent, time (ms) and
// which packet (its UDP payload is the id).
type ev struct {
	agent int
	ms    float64
	id    int
}

// idFrame is the Ethernet frame of packet id, with a TTL the agent's
// position changes, as a router on the way would.
func idFrame(id, agent int) []byte {
	p := baseUDP()
	p.ttl = uint8(64 - agent)
	p.id = uint16(id)
	var pl [8]byte
	binary.BigEndian.PutUint64(pl[:], uint64(id))
	p.l4 = udp(5000, 9999, uint16(agent), string(pl[:]))
	return eth(p.bytes(), byte(agent), etherIPv4)
}

type emitted struct{ agent, id int }

// feed runs a matcher of n agents over evs (sorted by time, stably) and
// returns it and what it emitted.
func feed(t *testing.T, n int, window time.Duration, evs []ev) (*matcher, []emitted) {
	t.Helper()
	evs = slices.Clone(evs)
	slices.SortStableFunc(evs, func(a, b ev) int {
		switch {
		case a.ms < b.ms:
			return -1
		case a.ms > b.ms:
			return 1
		}
		return 0
	})
	var out []emitted
	m := newMatcher(n, int64(window), func(p *packet) error {
		out = append(out, emitted{p.agent, int(binary.BigEndian.Uint64(p.data[len(p.data)-8:]))})
		return nil
	})
	for _, e := range evs {
		if err := m.add(e.agent, e.agent, int64(e.ms*1e6), 0, linkEthernet, idFrame(e.id, e.agent)); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.flush(); err != nil {
		t.Fatal(err)
	}
	if len(m.keys) != 0 || m.head != len(m.fifo) {
		t.Errorf("after flush: %d keys, %d packets held", len(m.keys), len(m.fifo)-m.head)
	}
	return m, out
}

// pc is a pair's expected counts.
type pc struct{ matched, fromNotTo, toNotFrom, dupFrom, dupTo int64 }

func counts(ps *pairState) pc {
	return pc{ps.matched, ps.fromNotTo, ps.toNotFrom, ps.dupFrom, ps.dupTo}
}

// stream is packets ids at agent, from ms on, one per ms, but skip.
func stream(agent int, ms float64, ids []int, skip ...int) []ev {
	var out []ev
	for i, id := range ids {
		if !slices.Contains(skip, id) {
			out = append(out, ev{agent, ms + float64(i), id})
		}
	}
	return out
}

func ids(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i + 1
	}
	return out
}

func TestMatcher(t *testing.T) {
	const w = 100 * time.Millisecond
	tests := []struct {
		name  string
		n     int
		evs   []ev
		pairs []pc // by pairIndex
		emit  []emitted
		delay []Delay // of pairs, when given
	}{
		{name: "all matched, 1.5 ms on the way", n: 2,
			evs:   append(stream(0, 0, ids(10)), stream(1, 1.5, ids(10))...),
			pairs: []pc{{matched: 10}},
			delay: []Delay{{Count: 10, Min: 1.5e6, P50: 1.5e6, P90: 1.5e6, P99: 1.5e6, Max: 1.5e6}}},
		{name: "drops on the way", n: 2,
			evs:   append(stream(0, 0, ids(10)), stream(1, 1, ids(10), 3, 7)...),
			pairs: []pc{{matched: 8, fromNotTo: 2}},
			emit:  []emitted{{0, 3}, {0, 7}}},
		{name: "seen at B only", n: 2,
			evs:   append(stream(0, 0, ids(5), 5), stream(1, 1, ids(5))...),
			pairs: []pc{{matched: 4, toNotFrom: 1}},
			emit:  []emitted{{1, 5}}},
		{name: "a retransmission at A, seen once at B", n: 2,
			evs:   append(stream(0, 0, []int{1, 2, 2, 3}), stream(1, 1, []int{1, 2, 3})...),
			pairs: []pc{{matched: 3, dupFrom: 1}}},
		{name: "a copy made on the way", n: 2,
			evs:   append(stream(0, 0, []int{1, 2, 3}), stream(1, 1, []int{1, 2, 2, 2, 3})...),
			pairs: []pc{{matched: 3, dupTo: 2}}},
		{name: "a retransmission seen at both", n: 2,
			evs:   append(stream(0, 0, []int{1, 2, 1}), stream(1, 1, []int{1, 2, 1})...),
			pairs: []pc{{matched: 3}}},
		{name: "repeats matched in order", n: 2,
			evs:   []ev{{0, 0, 1}, {0, 10, 1}, {1, 11, 1}, {1, 12, 1}},
			pairs: []pc{{matched: 2}},
			delay: []Delay{{Count: 2, Min: 2e6, P50: 2e6, P90: 11e6, P99: 11e6, Max: 11e6}}},
		{name: "reordered within the window", n: 2,
			evs:   append(stream(0, 0, ids(6)), stream(1, 1, []int{2, 1, 4, 3, 6, 5})...),
			pairs: []pc{{matched: 6}}},
		{name: "B's clock 50 ms behind: negative delays", n: 2,
			evs:   append(stream(0, 0, ids(4)), stream(1, -49, ids(4))...),
			pairs: []pc{{matched: 4}},
			delay: []Delay{{Count: 4, Min: -49e6, P50: -49e6, P90: -49e6, P99: -49e6, Max: -49e6}}},
		{name: "at the window's edge: matched", n: 2,
			evs:   []ev{{0, 0, 1}, {1, 100, 1}, {1, 200, 2}, {0, 300, 2}},
			pairs: []pc{{matched: 2}}},
		{name: "past the window: unmatched both ways", n: 2,
			evs:   []ev{{0, 0, 1}, {1, 100.000001, 1}, {1, 200, 2}, {0, 300.000001, 2}},
			pairs: []pc{{fromNotTo: 2, toNotFrom: 2}},
			emit:  []emitted{{0, 1}, {1, 1}, {1, 2}, {0, 2}}},
		{name: "the same key again after the window is a new packet", n: 2,
			evs:   []ev{{0, 0, 1}, {0, 500, 1}, {1, 501, 1}},
			pairs: []pc{{matched: 1, fromNotTo: 1}},
			emit:  []emitted{{0, 1}}},
		{name: "three agents, C misses one: written once", n: 3,
			evs: slices.Concat(stream(0, 0, ids(5)), stream(1, 1, ids(5)), stream(2, 2, ids(5), 4)),
			// pairs: A-B, A-C, B-C
			pairs: []pc{{matched: 5}, {matched: 4, fromNotTo: 1}, {matched: 4, fromNotTo: 1}},
			emit:  []emitted{{0, 4}, {1, 4}}},
		{name: "nothing at B", n: 2,
			evs:   stream(0, 0, ids(3)),
			pairs: []pc{{fromNotTo: 3}},
			emit:  []emitted{{0, 1}, {0, 2}, {0, 3}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, out := feed(t, tc.n, w, tc.evs)
			for i, want := range tc.pairs {
				if got := counts(m.pairs[i]); got != want {
					t.Errorf("pair %d: %+v, want %+v", i, got, want)
				}
			}
			if !slices.Equal(out, tc.emit) {
				t.Errorf("emitted %v, want %v", out, tc.emit)
			}
			for i, want := range tc.delay {
				if got := m.pairs[i].delay.summary(); !near(got, want) {
					t.Errorf("pair %d delay %+v, want %+v", i, got, want)
				}
			}
			// Every packet is counted once per pair it is in.
			for i := range tc.n {
				for j := i + 1; j < tc.n; j++ {
					ps := m.pairs[m.pairIndex(i, j)]
					if a := ps.matched + ps.fromNotTo + ps.dupFrom; a != m.counts[i] {
						t.Errorf("pair %d-%d: matched+fromNotTo+dupFrom %d, %d at %d", i, j, a, m.counts[i], i)
					}
					if b := ps.matched + ps.toNotFrom + ps.dupTo; b != m.counts[j] {
						t.Errorf("pair %d-%d: matched+toNotFrom+dupTo %d, %d at %d", i, j, b, m.counts[j], j)
					}
				}
			}
		})
	}
}

// TestMatcherRandomDrops: a long stream with random drops, delays that
// reorder and a window far shorter than the stream: every drop is
// found, nothing else, and the matcher never holds more than the
// window's packets.
func TestMatcherRandomDrops(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const n, w = 20000, 5 * time.Millisecond
	var evs []ev
	var want []emitted
	for id := 1; id <= n; id++ {
		ms := float64(id) * 0.01 // 100 packets per ms
		evs = append(evs, ev{0, ms, id})
		if rng.IntN(100) < 5 {
			want = append(want, emitted{0, id})
			continue
		}
		evs = append(evs, ev{1, ms + 1 + rng.Float64(), id}) // 1..2 ms later
	}
	m, out := feed(t, 2, w, evs)
	if got := counts(m.pairs[0]); got != (pc{matched: int64(n - len(want)), fromNotTo: int64(len(want))}) {
		t.Errorf("counts %+v, want %d matched, %d A not B", got, n-len(want), len(want))
	}
	if !slices.Equal(out, want) {
		t.Errorf("emitted %d packets, want the %d dropped", len(out), len(want))
	}
	d := m.pairs[0].delay.summary()
	if d.Min < 1e6 || d.Max > 2e6 || d.P50 < 1.4e6 || d.P50 > 1.6e6 {
		t.Errorf("delay %+v, want within 1..2 ms, median near 1.5 ms", d)
	}
	// The window holds about (5 ms + 2 ms) x 100 packets/ms x 2 agents.
	if c := cap(m.freeP); c > 2000 {
		t.Errorf("the matcher made %d packet records for a window of some 1400 packets", c)
	}
}

func TestMatcherAddAllocs(t *testing.T) {
	m := newMatcher(2, int64(time.Millisecond), func(*packet) error { return nil })
	frames := make([][]byte, 64)
	for i := range frames {
		frames[i] = idFrame(i, 0)
	}
	ts := int64(0)
	step := func() {
		for i, f := range frames {
			ts += 100_000
			m.add(i%2, 0, ts, 0, linkEthernet, f)
		}
	}
	for range 100 {
		step()
	}
	if a := testing.AllocsPerRun(100, step); a != 0 {
		t.Errorf("add allocates %v times per %d packets in steady state, want 0", a, len(frames))
	}
}

func TestPairIndex(t *testing.T) {
	for n := 2; n < 7; n++ {
		m := newMatcher(n, 1, nil)
		next := 0
		for i := range n {
			for j := i + 1; j < n; j++ {
				if got := m.pairIndex(i, j); got != next || m.pairIndex(j, i) != next {
					t.Fatalf("n %d: pairIndex(%d, %d) = %d, want %d", n, i, j, got, next)
				}
				next++
			}
		}
		if next != len(m.pairs) {
			t.Fatalf("n %d: %d pairs, made %d", n, next, len(m.pairs))
		}
	}
}

func ExampleReport_WriteTable() {
	r := Report{WindowNS: int64(2 * time.Second), DelayNote: DelayCaveat, Pairs: []Pair{{
		From: "edge1", To: "core1", AtFrom: 2000, AtTo: 1903, Matched: 1903, FromNotTo: 97,
		Delay: Delay{Count: 1903, Min: -120_000, P50: 85_000, P90: 140_000, P99: 610_000, Max: 2_300_000},
	}}}
	r.WriteTable(os.Stdout)
	// Output:
	// from -> to      at from  at to  matched  from, not to  to, not from  dup from  dup to  delay min  p50   p90    p99    max
	// edge1 -> core1  2000     1903   1903     97            0             0         0       -120µs     85µs  140µs  610µs  2.3ms
	// window 2s; delay is tTo - tFrom, each on its own agent's clock: it includes the offset between the two clocks, so it can be negative.
}

// near: the counts, min and max equal, the quantiles within the
// histogram's precision.
func near(got, want Delay) bool {
	close := func(a, b int64) bool { return a == b || math.Abs(float64(a-b)) <= math.Abs(float64(b))/subBuckets }
	return got.Count == want.Count && got.Min == want.Min && got.Max == want.Max &&
		close(got.P50, want.P50) && close(got.P90, want.P90) && close(got.P99, want.P99)
}

// BenchmarkMatcher: two agents, every packet seen at both 1 ms apart, a
// window of 10 ms at 1 packet per µs (some 20 000 packets held), with
// the unmatched packets kept for writing.
func BenchmarkMatcher(b *testing.B) {
	for _, size := range []int{64, 576, 1500} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			frames := make([][]byte, 4096)
			for i := range frames {
				f := idFrame(i, 0)
				frames[i] = append(f, make([]byte, max(size-len(f), 0))...)
				binary.BigEndian.PutUint32(frames[i][len(frames[i])-4:], uint32(i)) // unique payloads
			}
			m := newMatcher(2, int64(10*time.Millisecond), func(*packet) error { return nil })
			b.ReportAllocs()
			b.SetBytes(int64(2 * size))
			ts := int64(0)
			for i := 0; b.Loop(); i++ {
				f := frames[i%len(frames)]
				binary.BigEndian.PutUint32(f[len(f)-8:], uint32(i)) // unique keys
				ts += 1000
				m.add(0, 0, ts, 0, linkEthernet, f)
				m.add(1, 0, ts+1_000_000, 0, linkEthernet, f)
			}
		})
	}
}

// TestMatcherMemory logs the heap a window of packets takes, per packet.
func TestMatcherMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("measures the heap")
	}
	const n = 100_000
	held := func(window int64) (int64, *matcher) {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		m := newMatcher(2, window, nil)
		f := idFrame(0, 0)
		for i := range n {
			binary.BigEndian.PutUint32(f[len(f)-4:], uint32(i))
			if err := m.add(i%2, 0, int64(i), 0, linkEthernet, f); err != nil {
				t.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		return int64(after.HeapAlloc) - int64(before.HeapAlloc), m
	}
	all, m := held(1 << 62)
	t.Logf("%d packets of unique keys held (no -w): %d bytes each", n, all/n)
	if all/n > 500 {
		t.Errorf("%d bytes a packet held, docs/correlate.md says 300 to 500", all/n)
	}
	runtime.KeepAlive(m)
	// A window of 1 000 packets holds those (and the map's buckets
	// grown for them), not the 100 000 read.
	small, m := held(1000)
	t.Logf("window of 1000 packets: %d bytes held after %d packets", small, n)
	if small > all/20 {
		t.Errorf("window of 1000 packets: %d bytes held after %d packets, over 1/20 of the %d all %d take", small, n, all, n)
	}
	runtime.KeepAlive(m)
}
