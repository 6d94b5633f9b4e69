package query

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pcapsync/pcapsync/internal/index"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// reseal rewrites the index file at path with every block record's
// payload passed through edit, its chained checksums made valid again
// (what a forger with the format in hand writes).
func reseal(t *testing.T, path string, edit func(p []byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	h := 14 + int(le.Uint16(b[12:]))
	out := append([]byte(nil), b[:h+4]...)
	crc := le.Uint32(b[h:])
	for p := b[h+4:]; len(p) >= 9; {
		n := int(le.Uint32(p[1:]))
		kind, pl := p[0], append([]byte(nil), p[5:5+n]...)
		p = p[5+n+4:]
		if kind == 'B' {
			pl = edit(pl)
		}
		start := len(out)
		out = append(out, kind)
		out = le.AppendUint32(out, uint32(len(pl)))
		out = append(out, pl...)
		crc = crc32.Update(crc, castagnoli, out[start:])
		out = le.AppendUint32(out, crc)
	}
	if err := os.WriteFile(path, out, 0o640); err != nil {
		t.Fatal(err)
	}
}

// TestForgedIndexSameAsScan (issue 23 item 7): indexes with valid
// checksums that lie about their data file (blocks moved to 1970,
// emptied filters, offsets past the end, huge counts, another file's
// index with its name and size fixed, and, by another user, a lie that
// the data at each block's start cannot show) are not used: the query
// writes exactly what it writes with NoIndex, scanning the files they
// describe, and a warning names them.
func TestForgedIndexSameAsScan(t *testing.T) {
	dir := indexedAgents(t)
	cfg := Config{Dir: dir, Filter: "ip host 10.9.9.7", Since: ts(3_700_000), Until: ts(12_000_000)}
	scanCfg := cfg
	scanCfg.NoIndex = true
	want, _, err := runQuery(t, scanCfg)
	if err != nil {
		t.Fatal(err)
	}
	idx, _ := filepath.Glob(filepath.Join(dir, "*", "*.idx*"))
	orig := map[string][]byte{}
	for _, p := range idx {
		orig[p], _ = os.ReadFile(p)
	}
	le := binary.LittleEndian
	every := func(edit func(p []byte) []byte) func(t *testing.T) int {
		return func(t *testing.T) int {
			for _, p := range idx {
				reseal(t, p, edit)
			}
			return len(idx)
		}
	}
	for _, tc := range []struct {
		name  string
		forge func(t *testing.T) int // the files forged
	}{
		{"1970", every(func(p []byte) []byte {
			le.PutUint64(p[24:], 1000)
			le.PutUint64(p[32:], 2000)
			return p
		})},
		{"emptied filters", every(func(p []byte) []byte {
			le.PutUint32(p[48:], 0)
			le.PutUint32(p[52:], 0)
			return p[:56]
		})},
		{"cleared filters", every(func(p []byte) []byte {
			clear(p[56:])
			return p
		})},
		{"offsets past the end", every(func(p []byte) []byte {
			for _, o := range []int{0, 8, 16} {
				le.PutUint64(p[o:], le.Uint64(p[o:])+1<<40)
			}
			return p
		})},
		{"huge counts", every(func(p []byte) []byte {
			le.PutUint32(p[40:], 1<<32-1)
			le.PutUint32(p[44:], 1<<32-1)
			return p
		})},
		{"another file's", func(t *testing.T) int {
			n := 0
			for _, agent := range []string{"a1", "b2", "f6"} {
				files, _ := filepath.Glob(filepath.Join(dir, agent, "*.idx"))
				for i := 0; i+1 < len(files); i++ {
					ix, err := index.Parse(orig[files[i+1]], false)
					if err != nil {
						t.Fatal(err)
					}
					data := strings.TrimSuffix(files[i], index.Suffix)
					st, _ := os.Stat(data)
					ix.Name, ix.DataSize = filepath.Base(data), st.Size()
					os.WriteFile(files[i], ix.Append(nil), 0o640)
					n++
				}
			}
			return n
		}},
		{"another user's", func(t *testing.T) int {
			if os.Geteuid() != 0 {
				t.Skip("chown to another user needs root")
			}
			// Every block's last time at its first: its first packet
			// agrees, the packets after it do not.
			every(func(p []byte) []byte {
				copy(p[32:40], p[24:32])
				return p
			})(t)
			for _, p := range idx {
				if err := os.Chown(p, 65534, 65534); err != nil {
					t.Fatal(err)
				}
			}
			return len(idx)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Cleanup(func() {
				for p, b := range orig {
					os.Remove(p)
					os.WriteFile(p, b, 0o640)
				}
			})
			forged := tc.forge(t)
			var log bytes.Buffer
			c := cfg
			c.Logger = slog.New(slog.NewTextHandler(&log, nil))
			out, res, err := runQuery(t, c)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(withoutComments(t, out), withoutComments(t, want)) {
				t.Fatalf("%d bytes (%s), want the %d bytes of a scan", len(out), res, len(want))
			}
			if res.FilesScanned == 0 || forged == len(idx) && res.FilesIndexed != 0 || !strings.Contains(log.String(), "index not used") {
				t.Errorf("%d of %d indexes forged, %+v; log %s", forged, len(idx), res, log.String())
			}
		})
	}
}

// TestFIFOAsIndexQuery (issue 23 item 8): a FIFO in the place of a
// file's index does not hold the query: it is ignored with a warning,
// the file scanned, the answer that of a scan.
func TestFIFOAsIndexQuery(t *testing.T) {
	dir := indexedAgents(t)
	cfg := Config{Dir: dir, Agents: []string{"a1", "b2"}, Filter: "ip host 10.9.9.7"}
	want, _, err := runQuery(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	idx, _ := filepath.Glob(filepath.Join(dir, "a1", "*.idx"))
	os.Remove(idx[0])
	if err := unix.Mkfifo(idx[0], 0o640); err != nil {
		t.Fatal(err)
	}
	type result struct {
		out []byte
		res Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, res, err := runQuery(t, cfg)
		done <- result{out, res, err}
	}()
	select {
	case r := <-done:
		if r.err != nil || !bytes.Equal(withoutComments(t, r.out), withoutComments(t, want)) || r.res.FilesScanned != 1 {
			t.Fatalf("%d bytes, %+v, %v; want the %d bytes of a scan, one file scanned", len(r.out), r.res, r.err, len(want))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the query blocked on a FIFO as an index")
	}
}
