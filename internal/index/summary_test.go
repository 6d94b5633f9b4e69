package index

import (
	"bufio"
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"
)

// summaryOf reads b as readSummary does, from a buffer of size bytes
// (small sizes cut records across reads).
func summaryOf(b []byte, partial bool, size int) (*Index, error) {
	return readSummary(bufio.NewReaderSize(bytes.NewReader(b), size), partial)
}

// sameSummary fails unless s is ix without filters.
func sameSummary(t *testing.T, what string, s, ix *Index) {
	t.Helper()
	if !s.Summary || s.Name != ix.Name || s.Version != ix.Version || s.Codec != ix.Codec || s.HeadIfaces != ix.HeadIfaces ||
		s.BlockBytes != ix.BlockBytes || s.Final != ix.Final || s.DataSize != ix.DataSize || s.RawSize != ix.RawSize ||
		s.Ifaces != ix.Ifaces || len(s.All) != len(ix.All) {
		t.Fatalf("%s: summary %+v, index %+v", what, *s, *ix)
	}
	for i := range s.All {
		want := ix.All[i]
		want.filter = nil
		if s.All[i].filter != nil || !reflect.DeepEqual(s.All[i], want) {
			t.Fatalf("%s: block %d: summary %+v, index %+v", what, i, s.All[i], want)
		}
	}
}

// FuzzSummary: readSummary accepts exactly what Parse accepts, whole or
// as a file being written, whatever its read buffer's size, with the
// same blocks less their filters; it never panics, and allocates a
// bounded amount whatever a record's length claims.
func FuzzSummary(f *testing.F) {
	good := sample(f)
	f.Add(good, uint16(16))
	f.Add(good[:len(good)/2], uint16(100))
	f.Add(good[:headerFixed], uint16(16))
	f.Add([]byte{}, uint16(0))
	f.Add(append(append([]byte(nil), good...), 'B', 0xff, 0xff, 0xff, 0x7f), uint16(4096))
	f.Add(bytes.Repeat([]byte{0xff}, 300), uint16(30))
	f.Fuzz(func(t *testing.T, b []byte, size uint16) {
		for _, partial := range []bool{false, true} {
			ix, perr := Parse(b, partial)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			s, serr := summaryOf(b, partial, int(size))
			runtime.ReadMemStats(&after)
			if n := after.TotalAlloc - before.TotalAlloc; n > uint64(2*len(b)+64<<10) {
				t.Fatalf("readSummary of %d bytes allocated %d", len(b), n)
			}
			if (perr == nil) != (serr == nil) {
				t.Fatalf("partial %v: Parse: %v, readSummary: %v", partial, perr, serr)
			}
			if perr != nil {
				if !errors.Is(serr, ErrDamaged) && !errors.Is(serr, ErrVersion) {
					t.Fatalf("readSummary: %v, want ErrDamaged or ErrVersion", serr)
				}
				continue
			}
			sameSummary(t, "fuzzed", s, ix)
			if s.MayMatch(0, Port(1)) != true || len(s.Select(math.MinInt64, math.MaxInt64, Port(1))) != len(s.Blocks(math.MinInt64, math.MaxInt64)) {
				t.Fatal("a summary's blocks do not all match a key")
			}
		}
	})
}

// TestOpenSummary: OpenSummary of indexes written for real data files
// (plain and gzip) equals Open's less the filters, reads nothing of the
// data file, and refuses what Open refuses of the index: a flipped bit
// anywhere (a filter's included), a cut, another file's index, one
// larger than MaxSize, one writable by others; never a panic.
func TestOpenSummary(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"a1_20260101T000000.000Z.pcapng", "a1_20260101T010000.000Z.pcapng.gz"} {
		data := indexed(t, dir, name, 40, 3)
		ix, err := Open(data)
		if err != nil {
			t.Fatal(err)
		}
		s, err := OpenSummary(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		sameSummary(t, name, s, ix)
		if s.Probed != 0 || len(s.All) < 10 {
			t.Fatalf("%s: probed %d, %d blocks", name, s.Probed, len(s.All))
		}
		if _, err := s.Verify(nil, 0); !errors.Is(err, ErrMismatch) {
			t.Fatalf("Verify of a summary: %v", err)
		}
	}
	data := filepath.Join(dir, "a1_20260101T000000.000Z.pcapng")
	good, err := os.ReadFile(Path(data))
	if err != nil {
		t.Fatal(err)
	}
	put := func(b []byte, mode os.FileMode) {
		t.Helper()
		os.Remove(Path(data))
		if err := os.WriteFile(Path(data), b, mode); err != nil {
			t.Fatal(err)
		}
	}
	// Every bit of the index, those of the filters included.
	for i := range len(good) * 8 {
		b := append([]byte(nil), good...)
		b[i/8] ^= 1 << (i % 8)
		put(b, 0o640)
		if _, err := OpenSummary(data); !errors.Is(err, ErrDamaged) && !errors.Is(err, ErrVersion) && !errors.Is(err, ErrMismatch) {
			t.Fatalf("bit %d flipped: %v, want ErrDamaged", i, err)
		}
	}
	for n := 0; n < len(good); n += 7 {
		put(good[:n], 0o640)
		if _, err := OpenSummary(data); err == nil {
			t.Fatalf("cut at %d of %d bytes: accepted", n, len(good))
		}
	}
	other := indexed(t, t.TempDir(), "a1_20260101T000000.000Z.pcapng", 41, 9)
	ob, _ := os.ReadFile(Path(other))
	put(ob, 0o640)
	if _, err := OpenSummary(data); !errors.Is(err, ErrMismatch) {
		t.Fatalf("another file's index: %v, want ErrMismatch", err)
	}
	put(good, 0o666)
	os.Chmod(Path(data), 0o666)
	if _, err := OpenSummary(data); !errors.Is(err, ErrUntrusted) {
		t.Fatalf("an index writable by others: %v, want ErrUntrusted", err)
	}
	put(good, 0o640)
	f, err := os.OpenFile(Path(data), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(260 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := OpenSummary(data); !errors.Is(err, ErrDamaged) {
		t.Fatalf("an index over MaxSize: %v, want ErrDamaged", err)
	}
	os.Remove(Path(data))
	if _, err := OpenSummary(data); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("no index: %v, want fs.ErrNotExist", err)
	}
}
