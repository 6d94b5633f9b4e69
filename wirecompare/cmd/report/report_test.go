package main

import (
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReport renders testdata/raw.txt (two -benchtime=1x runs of the
// batch, one compression row, the checksum) and checks what the lead
// reads: the goal rows with a verdict each, the tables, and a chart
// that is well-formed SVG with a bar per codec and series.
func TestReport(t *testing.T) {
	dir := t.TempDir()
	out, chart := filepath.Join(dir, "REPORT.md"), filepath.Join(dir, "chart.svg")
	if err := run([]string{"-raw", "testdata/raw.txt", "-out", out, "-chart", chart, "-note", "NOTE"}, io.Discard); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	s := string(md)
	for _, want := range []string{
		"NOTE",
		"medians of 2 runs",
		"| encode >= 2x faster than vtprotobuf |",
		"| decode >= 30x faster than encoding-json |",
		"| decode, data copied >= 2x faster than vtprotobuf |",
		"| wire: 0 allocations",
		"| wire metadata under 10 bytes per record |",
		"## All operations: batch of 1000 realistic records",
		"| text | 32 | zstd-dict |",
		"## The wire format's checksum",
		"| — |",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	goals := strings.Count(s, "**met**") + strings.Count(s, "**NOT MET**")
	if goals != 12 {
		t.Errorf("%d goal verdicts, want 12", goals)
	}
	svg, err := os.ReadFile(chart)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Rects []struct{} `xml:"rect"`
	}
	if err := xml.Unmarshal(svg, &doc); err != nil {
		t.Fatalf("chart is not well-formed: %v", err)
	}
	// background + 3 legend swatches + 8 codecs x (2 time bars + 1 bytes bar)
	if want := 1 + 3 + 8*3; len(doc.Rects) != want {
		t.Errorf("chart has %d rects, want %d", len(doc.Rects), want)
	}
}

func TestReadResultsEmpty(t *testing.T) {
	if _, err := readResults(strings.NewReader("PASS\n"), "empty"); err == nil {
		t.Error("no results: no error")
	}
}

// TestReportConfig checks that the report takes the date, machine and
// run parameters from run.sh's configuration lines, so that it can be
// regenerated later from the raw output alone.
func TestReportConfig(t *testing.T) {
	raw, err := os.ReadFile("testdata/raw.txt")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "raw.txt")
	head := "date: 2000-01-02T03:04Z\nkernel: Linux 1.0\nnproc: 64\ncount: 2\nbenchtime: 1x\n"
	if err := os.WriteFile(in, append([]byte(head), raw...), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "REPORT.md")
	if err := run([]string{"-raw", in, "-out", out, "-chart", filepath.Join(dir, "c.svg")}, io.Discard); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Date: 2000-01-02T03:04Z", "64 CPUs", "Linux 1.0", "`COUNT=2 BENCHTIME=1x wirecompare/run.sh`"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report lacks %q", want)
		}
	}
}
