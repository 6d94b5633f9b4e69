package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBenchQuery runs a small query bench (3 agents, 8 MiB, one round)
// and checks that every side of both queries returned the packets the
// generator put there; then that a kept root is reused, and that the
// bench fails when a side's count is not the expected one.
func TestBenchQuery(t *testing.T) {
	requireTools(t, false, "mergecap", "editcap", "tcpdump")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	work := t.TempDir()
	cfg := QueryConfig{Exe: pcapsyncExe(t), Bytes: 8 << 20, Agents: 3, Span: 3 * time.Minute, Rotate: 1 << 20, Rounds: 1, Dir: work}
	res, err := Query(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := res.Data
	if res.Reused || d.Files < 2*cfg.Agents || d.DataBytes < cfg.Bytes || d.NeedleN == 0 || d.NeedleN > int64(cfg.Agents*queryNeedleFlows*queryNeedleLen) || d.RangeTCP == 0 || d.RangeTCP >= d.RangeN ||
		d.NeedleBlocks == 0 || d.NeedleMay < d.NeedleBlocks || d.Blocks < d.NeedleMay {
		t.Fatalf("root: reused %v, %+v", res.Reused, d)
	}
	if len(res.Cases) != 3 {
		t.Fatalf("%d cases, want 3", len(res.Cases))
	}
	for _, c := range res.Cases {
		if len(c.Sides) != 3 {
			t.Fatalf("%s: %d sides, want 3", c.Name, len(c.Sides))
		}
		for _, s := range c.Sides {
			if len(s.Runs) != 1 {
				t.Fatalf("%s %s: %d runs, want 1", c.Name, s.Name, len(s.Runs))
			}
			r := s.Runs[0]
			if int64(r.Packets) != c.Want || r.Wall <= 0 || r.RChar() <= 0 {
				t.Errorf("%s %s: %d packets (want %d), wall %v, rchar %d", c.Name, s.Name, r.Packets, c.Want, r.Wall, r.RChar())
			}
			if strings.HasPrefix(s.Name, "pcapsync") != (r.Summary != nil) {
				t.Errorf("%s %s: summary %+v", c.Name, s.Name, r.Summary)
			}
		}
		if c.Name == CaseExport {
			// Every packet, read from every data file.
			if c.Want != d.Packets {
				t.Errorf("export: want %d packets (of %d)", c.Want, d.Packets)
			}
			if all := c.side(SideMergecapW).Runs[0].RChar(); all < d.DataBytes {
				t.Errorf("export: mergecap read %d bytes of %d", all, d.DataBytes)
			}
			if sum := c.side(SidePcapsync).Runs[0].Summary; sum.FilesRead != d.Files {
				t.Errorf("export: the query read %d files of %d", sum.FilesRead, d.Files)
			}
			continue
		}
		// The comparison reads every data file; the query through its
		// indexes reads less than --no-index.
		if all := c.side(SideMergecap).Runs[0].RChar(); all < d.DataBytes {
			t.Errorf("%s: mergecap read %d bytes of %d", c.Name, all, d.DataBytes)
		}
		if ix, noIx := c.side(SidePcapsync).Runs[0].Summary, c.side(SideNoIndex).Runs[0].Summary; ix.BytesRead >= noIx.BytesRead || ix.FilesScanned != 0 || ix.FilesIndexed == 0 || noIx.FilesIndexed != 0 {
			t.Errorf("%s: with the index %+v, without %+v", c.Name, ix, noIx)
		}
	}
	var out bytes.Buffer
	if err := WriteQuery(&out, cfg, res, true); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| pcapsync query |", `| mergecap \| tcpdump |`, "editcap -A", "Goals (issue 16)",
		"| mergecap -w |", "| cat |", "Goals (issue 30, exports)", "export: pcapsync query / cat wall time"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}

	// The kept root is reused; a needle count that is not the output's
	// fails the bench.
	manifest := filepath.Join(work, queryManifest)
	b, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	var m QueryData
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m.NeedleN++
	if b, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(manifest, b, 0o640); err != nil {
		t.Fatal(err)
	}
	res, err = Query(ctx, cfg)
	if !res.Reused || err == nil || !strings.Contains(err.Error(), "want "+groupDigits(m.NeedleN)) {
		t.Fatalf("reused %v, error %v; want the needle's count refused", res.Reused, err)
	}
}

// TestExitIO checks that a process's reads are counted: cat of a file
// reads at least the file.
func TestExitIO(t *testing.T) {
	f := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(f, make([]byte, 1<<20), 0o640); err != nil {
		t.Fatal(err)
	}
	ps := &procSet{ctx: context.Background()}
	t.Cleanup(ps.stop)
	p, err := ps.start("cat", nil, "cat", f)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.wait(); err != nil {
		t.Fatal(err)
	}
	if p.usage.IO.RChar < 1<<20 {
		t.Errorf("rchar %d, want at least %d", p.usage.IO.RChar, 1<<20)
	}
}

// TestExportGoals checks issue 30's export goals on made-up rounds:
// judged by the median of the paired ratios, met only within both
// bounds, absent without the export case.
func TestExportGoals(t *testing.T) {
	runs := func(secs ...float64) []QueryRun {
		var rs []QueryRun
		for _, s := range secs {
			rs = append(rs, QueryRun{Wall: time.Duration(s * float64(time.Second))})
		}
		return rs
	}
	mk := func(ours, merge, cat []QueryRun) QueryResult {
		return QueryResult{Cases: []QueryCase{{Name: "needle"}, {Name: CaseExport, Sides: []QuerySide{
			{Name: SidePcapsync, Runs: ours}, {Name: SideMergecapW, Runs: merge}, {Name: SideCat, Runs: cat}}}}}
	}
	for _, c := range []struct {
		name             string
		ours, merge, cat []QueryRun
		met              bool
		vsCat            string
	}{
		{"both met", runs(1, 1, 1), runs(3.5, 3, 4), runs(0.8, 0.7, 0.9), true, "1.25x"},
		{"slower than 1.5x cat", runs(1, 1, 1), runs(4, 4, 4), runs(0.6, 0.6, 0.7), false, "1.67x"},
		{"under 3x mergecap", runs(1, 1, 1), runs(2.9, 3.2, 2.5), runs(0.9, 0.9, 0.9), false, "1.11x"},
		// medians of the sides alone would say met (1.0 / 0.7); the
		// rounds' pairs say 1.2 / 0.6, 2.0 / 1.0, 1.0 / 0.7 -> 2.0x
		{"paired", runs(1.2, 2.0, 1.0), runs(4, 8, 5), runs(0.6, 1.0, 0.7), false, "2.00x"},
	} {
		lines, met := mk(c.ours, c.merge, c.cat).ExportGoals()
		if met != c.met || len(lines) != 2 || !strings.Contains(lines[1], "wall time "+c.vsCat) {
			t.Errorf("%s: met %v (want %v), lines %q (want query / cat %s)", c.name, met, c.met, lines, c.vsCat)
		}
	}
	if lines, met := (QueryResult{Cases: []QueryCase{{Name: "needle"}}}).ExportGoals(); lines != nil || met {
		t.Errorf("without the export case: %q, %v", lines, met)
	}
}
