package index

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io/fs"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"golang.org/x/sys/unix"

	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/safefs"
	"github.com/pcapsync/pcapsync/internal/testutil/capturetest"
)

// writeData writes a plain pcapng data file as the store writes it at
// path: a section header, an Ethernet interface, then n UDP packets of
// flows after seed, 1 µs apart from t0 ns, each the last of its batch
// (a mark), so that Build with small blocks ends a block after each.
func writeData(t *testing.T, path string, n, seed int, t0 int64) {
	t.Helper()
	writeDataOpts(t, path, n, seed, t0, []byte{9, 0, 1, 0, 9, 0, 0, 0, 0, 0, 0, 0}) // if_tsresol 9, opt_endofopt
}

// writeDataOpts is writeData with the interface's options opts (ending
// with opt_endofopt; nil: none), its packets' timestamps t0, t0+1000,
// ... in the units the options say.
func writeDataOpts(t *testing.T, path string, n, seed int, t0 int64, opts []byte) {
	t.Helper()
	le := binary.LittleEndian
	b := capturetest.AppendNgHead(nil, linkEthernet, opts)
	for i := range n {
		data := eth(0x0800, 0, ipv4("10.0.0.1", "10.0.1."+itoa((seed+i)%250), 17, ports(uint16(1000+seed+i), 53)))
		opt := le.AppendUint16(nil, optCustomNoCopy)
		opt = le.AppendUint16(opt, markLen)
		opt = le.AppendUint32(opt, markPEN)
		opt = append(opt, "PSM1"...)
		opt = append(opt, make([]byte, markLen-8)...)
		opt = append(opt, 0, 0, 0, 0)
		b = capturetest.AppendEPB(b, uint64(t0+int64(i)*1000), data, opt)
	}
	if strings.HasSuffix(path, ".gz") {
		b = gzipMembers(t, b)
	}
	if err := os.WriteFile(path, b, 0o640); err != nil {
		t.Fatal(err)
	}
}

// gzipMembers compresses the pcapng stream b as the store does: a gzip
// member per commit, here the head and then every pcapng block.
func gzipMembers(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	member := func(p []byte) {
		zw := gzip.NewWriter(&out)
		zw.Write(p)
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	head := 28 + int(binary.LittleEndian.Uint32(b[28+4:]))
	member(b[:head])
	for p := b[head:]; len(p) > 0; {
		n := int(binary.LittleEndian.Uint32(p[4:]))
		member(p[:n])
		p = p[n:]
	}
	return out.Bytes()
}

// indexed writes a data file of n packets in dir and its index built
// with blocks of about 200 bytes (a few packets each), and returns its
// path.
func indexed(t *testing.T, dir, name string, n, seed int) string {
	t.Helper()
	path := filepath.Join(dir, name)
	writeData(t, path, n, seed, 1_700_000_000_000_000_000)
	buildIndex(t, path)
	return path
}

// buildIndex builds the index of the data file at path with blocks of
// about 200 bytes, writes it beside it and returns it as Open reads it.
func buildIndex(t *testing.T, path string) *Index {
	t.Helper()
	b, err := Build(context.Background(), path, 200)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, b); err != nil {
		t.Fatal(err)
	}
	ix, err := Open(path)
	if err != nil {
		t.Fatalf("the index built is refused: %v", err)
	}
	return ix
}

// regularIndex fails unless the index of data is a regular file that
// Open accepts.
func regularIndex(t *testing.T, data string) {
	t.Helper()
	fi, err := os.Lstat(Path(data))
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("index %s: %v, %v: want a regular file", Path(data), fi, err)
	}
	if _, err := Open(data); err != nil {
		t.Fatalf("index %s: %v", Path(data), err)
	}
}

// TestIndexNeverWritesThroughALink (issue 23 item 2): a link planted as
// the temporary file of an earlier version (<file>.idx.tmp) or as the
// index itself is never written through: the victim it points at keeps
// its bytes, and the index written is a regular file.
func TestIndexNeverWritesThroughALink(t *testing.T) {
	for _, where := range []string{".idx.tmp", ".idx"} {
		t.Run(where, func(t *testing.T) {
			dir := t.TempDir()
			agent := filepath.Join(dir, "a1")
			os.Mkdir(agent, 0o750)
			data := indexed(t, agent, "a1_20260101T000000.000Z.pcapng", 40, 0)
			victim := filepath.Join(t.TempDir(), "victim")
			// The victim of a link as the index: a valid index of this
			// very file, which must not make the link accepted.
			good := []byte("victim")
			if where == ".idx" {
				good, _ = os.ReadFile(Path(data))
			}
			os.WriteFile(victim, good, 0o640)
			os.Remove(Path(data))
			if err := os.Symlink(victim, data+where); err != nil {
				t.Fatal(err)
			}
			rep, err := RebuildDir(context.Background(), dir, 200)
			if err != nil {
				t.Fatal(err)
			}
			if b, _ := os.ReadFile(victim); !slices.Equal(b, good) {
				t.Fatalf("the victim was written through the link: %d bytes", len(b))
			}
			regularIndex(t, data)
			if rep.Built+rep.Rebuilt != 1 {
				t.Errorf("report %+v: want the index built", rep)
			}
			if where == ".idx.tmp" {
				if fi, err := os.Lstat(data + where); err != nil || fi.Mode()&fs.ModeSymlink == 0 || rep.Foreign != 1 {
					t.Errorf("the planted link: %v, %v, report %+v: want it left and reported", fi, err, rep)
				}
			}
		})
	}
}

// TestRebuildDirLeavesForeignFiles (issue 23 item 5): pcapsync index
// deletes only what it made: an orphan index named after a data file
// whose header names it, and its own temporary files once stale.
// Files named like indexes that it did not make are left and listed.
func TestRebuildDirLeavesForeignFiles(t *testing.T) {
	dir := t.TempDir()
	agent := filepath.Join(dir, "a1")
	os.Mkdir(agent, 0o750)
	data := indexed(t, agent, "a1_20260101T000000.000Z.pcapng", 20, 0)
	orphan := filepath.Join(agent, "a1_20250101T000000.000Z.pcapng")
	b, _ := os.ReadFile(Path(data))
	ix, _ := Parse(b, false)
	ix.Name = filepath.Base(orphan)
	os.WriteFile(Path(orphan), ix.Append(nil), 0o640)
	staleTmp := tempName(data)
	os.WriteFile(staleTmp, []byte("left by a crash"), 0o640)
	old := time.Now().Add(-2 * tempAge)
	os.Chtimes(staleTmp, old, old)
	freshTmp := tempName(data)
	os.WriteFile(freshTmp, []byte("being written"), 0o640)
	keep := map[string]string{
		"notes.idx":      "notes",
		"report.idx.tmp": "report",
		"foreign.idx":    "foreign",
		// Named after a data file, but not an index of it.
		"a1_20240101T000000.000Z.pcapng.idx": "not an index",
	}
	for name, body := range keep {
		os.WriteFile(filepath.Join(agent, name), []byte(body), 0o640)
		os.Chtimes(filepath.Join(agent, name), old, old)
	}
	rep, err := RebuildDir(context.Background(), dir, 200)
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range keep {
		if b, err := os.ReadFile(filepath.Join(agent, name)); err != nil || string(b) != body {
			t.Errorf("%s: %q, %v: want it left alone", name, b, err)
		}
	}
	if _, err := os.Lstat(Path(orphan)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the orphan index: %v, want it removed", err)
	}
	if _, err := os.Lstat(staleTmp); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the stale temporary file: %v, want it removed", err)
	}
	if _, err := os.Lstat(freshTmp); err != nil {
		t.Errorf("the fresh temporary file: %v, want it left", err)
	}
	if rep.Orphans != 1 || rep.Temps != 1 || rep.Foreign != len(keep) || len(rep.ForeignFiles) != len(keep) || rep.Valid != 1 {
		t.Errorf("report %+v", rep)
	}
}

// TestFIFOAsIndex (issue 23 item 8): a FIFO in an index's place is
// never opened blocking: Open refuses it at once (the data file is then
// scanned) and RebuildDir replaces it with the index.
func TestFIFOAsIndex(t *testing.T) {
	dir := t.TempDir()
	data := indexed(t, dir, "a1_20260101T000000.000Z.pcapng", 20, 0)
	os.Remove(Path(data))
	if err := unix.Mkfifo(Path(data), 0o640); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := Open(data)
		if err == nil {
			_, err = RebuildDir(context.Background(), dir, 200)
		} else if errors.Is(err, safefs.ErrNotRegular) {
			var rep DirReport
			rep, err = RebuildDir(context.Background(), dir, 200)
			if err == nil && rep.Rebuilt != 1 {
				err = errors.New("not rebuilt")
			}
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("blocked on the FIFO")
	}
	regularIndex(t, data)
}

// TestOpenBoundsMemory (issue 23 item 7): an index larger than MaxSize
// of its data file (here 260 MB, sparse, behind a valid header) is
// refused without being read: Open allocates a bounded amount whatever
// the file claims.
func TestOpenBoundsMemory(t *testing.T) {
	dir := t.TempDir()
	data := indexed(t, dir, "a1_20260101T000000.000Z.pcapng", 20, 0)
	f, err := os.OpenFile(Path(data), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(260 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = Open(data)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrDamaged) {
		t.Errorf("Open = %v, want ErrDamaged", err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Errorf("Open allocated %d bytes for a 260 MB index of a small data file", n)
	}
}

// forge rewrites the index of data with edit applied to it, its
// checksums valid.
func forge(t *testing.T, data string, edit func(ix *Index)) {
	t.Helper()
	b, err := os.ReadFile(Path(data))
	if err != nil {
		t.Fatal(err)
	}
	ix, err := Parse(b, false)
	if err != nil {
		t.Fatal(err)
	}
	edit(ix)
	if err := os.WriteFile(Path(data), ix.Append(nil), 0o640); err != nil {
		t.Fatal(err)
	}
}

// TestForgedIndexRefused (issue 23 item 7): indexes whose checksums
// verify but which disagree with their data file are refused by Open:
// another file's index with its name and size fixed, blocks moved to
// 1970, emptied filters, offsets past the end, counts of packets or
// interfaces the data do not hold; and an index that its data file's
// owner did not write (another user's, or writable by others) whatever
// it holds.
func TestForgedIndexRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(t *testing.T, data string)
		want error
	}{
		{"another file's", func(t *testing.T, data string) {
			other := indexed(t, t.TempDir(), "b.pcapng", 23, 7)
			b, _ := os.ReadFile(Path(other))
			os.WriteFile(Path(data), b, 0o640)
			st, _ := os.Stat(data)
			forge(t, data, func(ix *Index) { ix.Name, ix.DataSize = filepath.Base(data), st.Size() })
		}, ErrMismatch},
		{"1970", func(t *testing.T, data string) {
			forge(t, data, func(ix *Index) {
				for i := range ix.All {
					ix.All[i].First, ix.All[i].Last = 1000, 2000
				}
			})
		}, ErrMismatch},
		{"emptied filters", func(t *testing.T, data string) {
			forge(t, data, func(ix *Index) {
				for i := range ix.All {
					ix.All[i].filter, ix.All[i].Keys = nil, 0
				}
			})
		}, ErrMismatch},
		{"cleared filters", func(t *testing.T, data string) {
			forge(t, data, func(ix *Index) {
				for i := range ix.All {
					clear(ix.All[i].filter)
				}
			})
		}, ErrMismatch},
		{"offsets past the end", func(t *testing.T, data string) {
			forge(t, data, func(ix *Index) {
				for i := range ix.All {
					ix.All[i].Seek += 1 << 40
					ix.All[i].Raw += 1 << 40
					ix.All[i].RawEnd += 1 << 40
				}
				ix.RawSize += 1 << 40
			})
		}, ErrMismatch},
		{"offsets shifted", func(t *testing.T, data string) {
			forge(t, data, func(ix *Index) {
				for i := range ix.All {
					ix.All[i].Seek += 8
					ix.All[i].Raw += 8
				}
			})
		}, ErrMismatch},
		{"no packets", func(t *testing.T, data string) {
			forge(t, data, func(ix *Index) {
				for i := range ix.All {
					ix.All[i].Packets = 0
				}
			})
		}, ErrMismatch},
		{"huge counts", func(t *testing.T, data string) {
			forge(t, data, func(ix *Index) {
				for i := range ix.All {
					ix.All[i].Packets, ix.All[i].Ifaces = 1<<32-1, 1<<32-1
				}
				ix.HeadIfaces = 0xffff
			})
		}, ErrMismatch},
		{"another user's", func(t *testing.T, data string) {
			// A forgery Verify cannot see (the last packets of each
			// block moved out of its range) by a user who does not own
			// the data file.
			forge(t, data, func(ix *Index) {
				for i := range ix.All {
					ix.All[i].Last = ix.All[i].First
				}
			})
			if os.Geteuid() != 0 {
				t.Skip("chown to another user needs root")
			}
			if err := os.Chown(Path(data), 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}, ErrUntrusted},
		{"writable by others", func(t *testing.T, data string) {
			os.Chmod(Path(data), 0o666)
		}, ErrUntrusted},
		{"gzip: a block not at a member", func(t *testing.T, data string) {
			forge(t, data, func(ix *Index) {
				ix.All[len(ix.All)/2].Seek++
			})
		}, ErrMismatch},
		{"gzip: another file's", func(t *testing.T, data string) {
			other := indexed(t, t.TempDir(), "b.pcapng.gz", 31, 7)
			b, _ := os.ReadFile(Path(other))
			os.WriteFile(Path(data), b, 0o640)
			st, _ := os.Stat(data)
			forge(t, data, func(ix *Index) { ix.Name, ix.DataSize = filepath.Base(data), st.Size() })
		}, ErrMismatch},
		{"gzip: 1970", func(t *testing.T, data string) {
			forge(t, data, func(ix *Index) {
				for i := range ix.All {
					ix.All[i].First, ix.All[i].Last = 1000, 2000
				}
			})
		}, ErrMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			name := "a1_20260101T000000.000Z.pcapng"
			if strings.HasPrefix(tc.name, "gzip") {
				name += ".gz"
			}
			data := indexed(t, dir, name, 30, 0)
			tc.edit(t, data)
			if _, err := Open(data); !errors.Is(err, tc.want) {
				t.Fatalf("Open = %v, want %v", err, tc.want)
			}
			rep, err := RebuildDir(context.Background(), dir, 200)
			if err != nil || rep.Rebuilt != 1 {
				t.Fatalf("RebuildDir: %+v, %v: want the index rebuilt", rep, err)
			}
			regularIndex(t, data)
		})
	}
}

// TestWriteInRefusesLinkedDirectories: RebuildDir creates an index
// only where no directory below its root is a link (an agent directory
// swapped for a link while it walks): nothing is created beyond it.
func TestWriteInRefusesLinkedDirectories(t *testing.T) {
	root, elsewhere := t.TempDir(), t.TempDir()
	if err := os.Symlink(elsewhere, filepath.Join(root, "a1")); err != nil {
		t.Fatal(err)
	}
	err := writeIn(root, "a1/a1_20260101T000000.000Z.pcapng", []byte("index"))
	if !errors.Is(err, safefs.ErrLink) {
		t.Fatalf("writeIn below a linked directory = %v, want ErrLink", err)
	}
	if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
		t.Fatalf("created beyond the link: %v", ents)
	}
}

// TestUnkeyedLinkType (issue 24): the blocks of packets of a link type
// whose keys are not read (802.11 here) match every key, so that no
// filter skips them; an index whose filters say otherwise is refused.
func TestUnkeyedLinkType(t *testing.T) {
	data := filepath.Join(t.TempDir(), "w.pcapng")
	writeData(t, data, 40, 3, 1_700_000_000_000_000_000)
	b, err := os.ReadFile(data)
	if err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint16(b[28+8:], 105) // the interface's link type
	if err := os.WriteFile(data, b, 0o640); err != nil {
		t.Fatal(err)
	}
	ix := buildIndex(t, data)
	m := And(Host(netip.MustParseAddr("192.0.2.99")), Port(7), Proto(250))
	if n := len(ix.All); n < 2 || len(ix.Select(math.MinInt64, math.MaxInt64, m)) != 1 || ix.Select(math.MinInt64, math.MaxInt64, m)[0].N != n {
		t.Fatalf("%d blocks; selected %+v, want all", n, ix.Select(math.MinInt64, math.MaxInt64, m))
	}
	forge(t, data, func(ix *Index) {
		for i := range ix.All {
			ix.All[i].filter[0] = 0
		}
	})
	if _, err := Open(data); !errors.Is(err, ErrMismatch) {
		t.Fatalf("filters not full: %v, want ErrMismatch", err)
	}
}

// TestBuildTimeResolution: the index of a file whose interface counts
// time in other units than nanoseconds (if_tsresol: microseconds by
// default, milliseconds, 2^-20 s; if_tsoffset) gives its blocks'
// times in nanoseconds as pcapfile reads the packets, and Open's probe
// agrees. The builder read the raw values as nanoseconds: a file of
// microseconds under the root, indexed by `pcapsync index`, had its
// blocks claim 1970 and a query of a time range skip them.
func TestBuildTimeResolution(t *testing.T) {
	le := binary.LittleEndian
	opt, end := capturetest.NgOption, capturetest.NgEnd
	offset := le.AppendUint64(nil, 1000)
	for _, c := range []struct {
		name string
		opts []byte
		t0   int64
	}{
		{"microseconds by default", nil, 1_700_000_000_000_000},
		{"milliseconds", slices.Concat(opt(9, 3), end), 1_700_000_000_000},
		{"nanoseconds", slices.Concat(opt(9, 9), end), 1_700_000_000_000_000_000},
		{"2^-20 s", slices.Concat(opt(9, 0x80|20), end), 1_700_000_000 << 20},
		{"microseconds from an offset", slices.Concat(opt(9, 6), opt(14, offset...), end), 1_699_999_000_000_000},
	} {
		t.Run(c.name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "r.pcapng")
			writeDataOpts(t, data, 40, 1, c.t0, c.opts)
			var want []int64
			capturetest.EachPacket(t, data, func(_ *pcapfile.Reader, p *pcapfile.Packet) { want = append(want, p.Timestamp) })
			ix := buildIndex(t, data)
			var got []int64
			for _, blk := range ix.All {
				got = append(got, blk.First, blk.Last)
			}
			if len(ix.All) < 2 || got[0] != want[0] || got[len(got)-1] != want[len(want)-1] || !slices.IsSorted(got) {
				t.Errorf("blocks' times %v, the packets' %d to %d", got, want[0], want[len(want)-1])
			}
		})
	}
}
