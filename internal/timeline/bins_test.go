package timeline

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/index"
)

// binsBase is the start of binsRoot's files: a whole number of bins.
var binsBase = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

// binsRoot writes a root of agents a0..a2, each of files closed files
// of random blocks (0 to 40 packets at random times, spanning up to a
// minute, some within one bin, some over many, some empty), each a
// sparse plain data file with its index and its timeline summary
// (index.WriteBins, as the store writes it at close). It returns the
// data files' paths.
func binsRoot(t *testing.T, dir string, files int, seed uint64) []string {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	frame := gen.Frame(make([]byte, 80), gen.LinkTypeEthernet, 1, 1)
	var out []string
	for a := range 3 {
		name := fmt.Sprintf("a%d", a)
		ad := filepath.Join(dir, name)
		if err := os.MkdirAll(ad, 0o750); err != nil {
			t.Fatal(err)
		}
		at := binsBase.UnixNano() + rng.Int64N(int64(time.Minute))
		for fi := range files {
			file := name + "_" + time.Unix(0, at).UTC().Format("20060102T150405.000Z") + ".pcapng"
			p := filepath.Join(ad, file)
			var bl index.Builder
			bl.Reset(file, index.CodecNone, 1, 1<<16, 48, 48)
			raw := int64(48)
			for range 5 + rng.IntN(30) {
				span := rng.Int64N(int64(time.Minute))
				if rng.IntN(3) == 0 {
					span = rng.Int64N(int64(time.Second))
				}
				n := rng.IntN(41)
				for k := range n {
					bl.Add(gen.LinkTypeEthernet, at+span*int64(k)/int64(max(n-1, 1)), frame)
				}
				raw += 1000 + rng.Int64N(1<<16)
				bl.EndBlock(raw, 1, raw)
				at += span + rng.Int64N(int64(20*time.Second))
			}
			if fi == files-1 && a == 1 {
				at += int64(10 * time.Minute) // a gap before the next agent's end
			}
			bl.Finish(raw, 1, raw, raw)
			f, err := os.Create(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Truncate(raw); err != nil {
				t.Fatal(err)
			}
			f.Close()
			if err := os.WriteFile(index.Path(p), bl.Pending(), 0o640); err != nil {
				t.Fatal(err)
			}
			if _, err := index.WriteBins(p); err != nil {
				t.Fatal(err)
			}
			out = append(out, p)
		}
	}
	return out
}

// timelines builds the timeline of dir over [since, until) by step
// with the summaries (OpenBins) and without (the index only), and
// returns them.
func timelines(t *testing.T, dir string, since, until time.Time, step time.Duration) (bins, ix Timeline) {
	t.Helper()
	ctx := context.Background()
	bins, err := BuildTimeline(ctx, dir, nil, since, until, step)
	if err != nil {
		t.Fatal(err)
	}
	OpenBins = nil
	defer func() { OpenBins = index.OpenBins }()
	ix, err = BuildTimeline(ctx, dir, nil, since, until, step)
	if err != nil {
		t.Fatal(err)
	}
	return bins, ix
}

// sameTimeline fails t unless a and b are equal but for what was read
// (IndexRead, Summaries).
func sameTimeline(t *testing.T, what string, a, b Timeline) {
	t.Helper()
	a.Coverage.IndexRead, b.Coverage.IndexRead = 0, 0
	a.Coverage.Summaries, b.Coverage.Summaries = 0, 0
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Errorf("%s: the summaries' timeline differs from the index's:\n%s\n%s", what, ja, jb)
	}
}

// TestBinsEqualIndex: where the range and step are whole bins, the
// timeline from the summaries equals the timeline from the indexes
// (series, gaps, coverage's blocks), reading every file's summary;
// where they are not, it reads the indexes.
func TestBinsEqualIndex(t *testing.T) {
	dir := t.TempDir()
	binsRoot(t, dir, 4, 1)
	b0 := binsBase
	for _, c := range []struct {
		since, until time.Time
		step         time.Duration
		whole        bool
	}{
		{b0, b0.Add(time.Hour), 10 * time.Second, true},
		{b0, b0.Add(time.Hour), 20 * time.Second, true},
		{b0, b0.Add(time.Hour), time.Minute, true},
		{b0.Add(-time.Hour), b0.Add(2 * time.Hour), 5 * time.Minute, true},
		{b0.Add(3 * time.Minute), b0.Add(9*time.Minute + 10*time.Second), 30 * time.Second, true}, // files clipped at both ends
		{b0.Add(2 * time.Minute), b0.Add(16 * time.Minute), 7 * time.Minute, true},
		{b0.Add(2 * time.Minute), b0.Add(12*time.Minute + 5*time.Second), time.Minute, false},
		{b0, b0.Add(24 * time.Hour), time.Hour, true},
		{b0.Add(-24 * time.Hour), b0.Add(-time.Hour), time.Minute, true}, // nothing
		{b0, b0.Add(10 * time.Minute), 5 * time.Second, false},
		{b0.Add(time.Second), b0.Add(10*time.Minute + time.Second), time.Minute, false},
	} {
		what := fmt.Sprintf("%v..%v by %v", c.since.Sub(b0), c.until.Sub(b0), c.step)
		bins, ix := timelines(t, dir, c.since, c.until, c.step)
		sameTimeline(t, what, bins, ix)
		want := 0
		if c.whole {
			want = bins.Coverage.Files
		}
		if bins.Coverage.Summaries != want || ix.Coverage.Summaries != 0 {
			t.Errorf("%s: %d of %d files from their summary, want %d", what, bins.Coverage.Summaries, bins.Coverage.Files, want)
		}
		if c.whole && bins.Coverage.Files > 0 && bins.Coverage.IndexRead >= ix.Coverage.IndexRead {
			t.Errorf("%s: read %d bytes of summaries, %d of indexes", what, bins.Coverage.IndexRead, ix.Coverage.IndexRead)
		}
	}
	bins, _ := timelines(t, dir, b0, b0.Add(time.Hour), time.Minute)
	if bins.Coverage.Files != 12 || bins.Coverage.Blocks == 0 || sumPackets(bins) == 0 {
		t.Fatalf("the root's timeline is empty: %+v", bins.Coverage)
	}
}

func sumPackets(t Timeline) int64 {
	var n int64
	for _, s := range t.Agents {
		for _, p := range s.Packets {
			if p != nil {
				n += *p
			}
		}
	}
	return n
}

// TestBinsRefused: a summary that is damaged, cut short, another
// file's, oversized, stale, a link or writable by others is refused
// (index.OpenBins), and the timeline reads that file's index instead:
// the same answer, never a panic.
func TestBinsRefused(t *testing.T) {
	for _, c := range []struct {
		name  string
		spoil func(t *testing.T, p, other string)
	}{
		{"flipped", func(t *testing.T, p, _ string) { edit(t, p, func(b []byte) []byte { b[len(b)/2] ^= 1; return b }) }},
		{"truncated", func(t *testing.T, p, _ string) { edit(t, p, func(b []byte) []byte { return b[:len(b)-5] }) }},
		{"empty", func(t *testing.T, p, _ string) { edit(t, p, func([]byte) []byte { return nil }) }},
		{"foreign", func(t *testing.T, p, other string) { copyFile(t, index.BinsPath(other), index.BinsPath(p)) }},
		{"oversized", func(t *testing.T, p, _ string) {
			edit(t, p, func(b []byte) []byte { return append(b, make([]byte, 4<<20)...) })
		}},
		{"stale", func(t *testing.T, p, _ string) {
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.Write([]byte("more"))
			f.Close()
		}},
		{"link", func(t *testing.T, p, other string) {
			os.Remove(index.BinsPath(p))
			if err := os.Symlink(index.BinsPath(other), index.BinsPath(p)); err != nil {
				t.Fatal(err)
			}
		}},
		{"writable", func(t *testing.T, p, _ string) {
			if err := os.Chmod(index.BinsPath(p), 0o666); err != nil {
				t.Fatal(err)
			}
		}},
		{"missing", func(t *testing.T, p, _ string) { os.Remove(index.BinsPath(p)) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			files := binsRoot(t, dir, 2, 2)
			c.spoil(t, files[1], files[0])
			if _, err := index.OpenBins(files[1]); err == nil {
				t.Fatal("the spoiled summary was taken")
			}
			bins, ix := timelines(t, dir, binsBase, binsBase.Add(time.Hour), time.Minute)
			sameTimeline(t, c.name, bins, ix)
			// The spoiled file from its index; but a stale one is
			// refused by its index too (unindexed in both).
			if bins.Coverage.Summaries != bins.Coverage.Files-1+bins.Coverage.Unindexed {
				t.Errorf("%d of %d files from their summary, want all but the spoiled one", bins.Coverage.Summaries, bins.Coverage.Files)
			}
		})
	}
}

func edit(t *testing.T, p string, f func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(index.BinsPath(p))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(index.BinsPath(p), f(b), 0o640); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o640); err != nil {
		t.Fatal(err)
	}
}
