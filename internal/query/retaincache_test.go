package query

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pcapsync/pcapsync/internal/layout"
)

// TestForgedRetentionTimes: a retention cache (layout.RetainDir) that
// lists the files with their right sizes but times of 1970, with no or
// another modification time, is not trusted: a range query returns
// every packet of the range, reading the files' indexes or, with
// NoIndex, the files.
func TestForgedRetentionTimes(t *testing.T) {
	var batches [][]tp
	for b := range 20 {
		var batch []tp
		for i := range 10 {
			batch = append(batch, tp{ts: int64(b*10+i) * 1e6, iface: i % 2, port: uint16(1000 + i)})
		}
		batches = append(batches, batch)
	}
	for _, forge := range []struct {
		name string
		mod  func(float64) any // the forged "mod" field; nil: none
	}{
		{"no modification time", nil},
		{"another modification time", func(m float64) any { return m + 1000 }},
	} {
		t.Run(forge.name, func(t *testing.T) {
			dir := t.TempDir()
			refs := writeAgent(t, dir, agentSpec{name: "a1", rotate: 4096, batches: batches}, 0)
			path := filepath.Join(dir, layout.RetainDir, "a1.json")
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("no retention cache written: %v", err)
			}
			var doc map[string]any
			if err := json.Unmarshal(b, &doc); err != nil {
				t.Fatal(err)
			}
			files, _ := doc["files"].([]any)
			if len(files) < 3 {
				t.Fatalf("%d files in the cache, want several", len(files))
			}
			for _, f := range files {
				e := f.(map[string]any)
				e["first"], e["last"] = 1, 2 // 1970, sizes left right
				mod, _ := e["mod"].(float64)
				delete(e, "mod")
				if forge.mod != nil {
					e["mod"] = forge.mod(mod)
				}
			}
			if b, err = json.Marshal(doc); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, b, 0o640); err != nil {
				t.Fatal(err)
			}
			since, until := int64(50e6), int64(150e6)
			want := expect(refs, since, until, nil)
			for _, noIndex := range []bool{false, true} {
				out, _, err := runQuery(t, Config{Dir: dir, Agents: []string{"a1"}, Since: ts(since), Until: ts(until), NoIndex: noIndex})
				if err != nil {
					t.Fatal(err)
				}
				pkts, _, _ := readOutput(t, out)
				if !slices.EqualFunc(pkts, want, func(a, b got) bool { return a.TS == b.TS && a.Iface == b.Iface && string(a.Data) == string(b.Data) }) {
					t.Errorf("NoIndex %v: %d packets, want %d", noIndex, len(pkts), len(want))
				}
			}
		})
	}
}

// TestUnreadableRetentionIndex: retention's index that is there but
// cannot be opened (a FIFO in its place here; a file outside the user's
// permissions in test/e2e's TestRetentionIndexGroupReadable) makes the
// query warn once, however many agents have one, and still return every
// packet, the files' times read from the files.
func TestUnreadableRetentionIndex(t *testing.T) {
	var batches [][]tp
	for b := range 10 {
		var batch []tp
		for i := range 10 {
			batch = append(batch, tp{ts: int64(b*10+i) * 1e6, port: uint16(1000 + i)})
		}
		batches = append(batches, batch)
	}
	dir := t.TempDir()
	var refs []ref
	for rank, name := range []string{"a1", "a2", "a3"} {
		refs = append(refs, writeAgent(t, dir, agentSpec{name: name, rotate: 4096, batches: batches}, rank)...)
	}
	query := func() (warnings int, log string) {
		t.Helper()
		var buf bytes.Buffer
		out, _, err := runQuery(t, Config{Dir: dir, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
		if err != nil {
			t.Fatal(err)
		}
		if pkts, _, _ := readOutput(t, out); len(pkts) != len(refs) {
			t.Errorf("%d packets, want %d", len(pkts), len(refs))
		}
		return strings.Count(buf.String(), "retention's index of file times cannot be read"), buf.String()
	}
	if n, log := query(); n != 0 {
		t.Fatalf("readable indexes: %d warnings:\n%s", n, log)
	}
	for _, name := range []string{"a2", "a3"} {
		path := filepath.Join(dir, layout.RetainDir, name+".json")
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mkfifo(path, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	if n, log := query(); n != 1 || !strings.Contains(log, "agent=a2") {
		t.Fatalf("two unreadable indexes: %d warnings, want 1, about a2:\n%s", n, log)
	}
}
