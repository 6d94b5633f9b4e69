package store

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/layout"
)

// FuzzScanPart feeds repair's scanner arbitrary files of each codec.
// Properties, beyond not panicking:
//   - the cut is within the file, and 0 exactly when no mark was found;
//   - the scan is idempotent: the file cut where the scan says (with
//     what a zstd cut needs appended) scans to the same cut and marks,
//     so a repaired file is never cut again by the next start;
//   - memory stays bounded: the inputs claim blocks of any length, and
//     the scanner allocates nothing for them (a claim it believed
//     would exhaust the fuzzer's memory).
func FuzzScanPart(f *testing.F) {
	dir := f.TempDir()
	for i, fc := range []compress.Spec{{}, {Codec: compress.Gzip}, {Codec: compress.Zstd}} {
		path, _ := writePart(f, dir, partSpec{fc: fc, batches: 3, perBatch: 2, commitEvery: 1, tail: true,
			packet: func(buf []byte, i uint64) []byte { return buf[:60+i%7] }})
		b, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		os.RemoveAll(filepath.Join(dir, "ag"))
		f.Add(byte(i), b)
		f.Add(byte(i), b[:len(b)/2])
		f.Add(byte(i), append(b[:len(b):len(b)], 0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0))
	}
	f.Add(byte(0), []byte{})
	f.Fuzz(func(t *testing.T, which byte, data []byte) {
		codec := []compress.Codec{compress.None, compress.Gzip, compress.Zstd}[which%3]
		sc, err := layout.Scan(context.Background(), bytes.NewReader(data), codec)
		if err != nil {
			t.Fatalf("scan of an in-memory file: %v", err)
		}
		if sc.Cut < 0 || sc.Cut > int64(len(data)) {
			t.Fatalf("cut %d outside the %d-byte file", sc.Cut, len(data))
		}
		if (sc.Cut == 0) != (len(sc.Marks) == 0) {
			t.Fatalf("cut %d with %d marks", sc.Cut, len(sc.Marks))
		}
		if sc.Cut == 0 {
			return
		}
		cut := data[:sc.Cut:sc.Cut]
		if codec == compress.Zstd && !(sc.Complete && sc.Cut == int64(len(data))) {
			cut = append(cut, zstdLastBlock[:]...)
		}
		again, err := layout.Scan(context.Background(), bytes.NewReader(cut), codec)
		if err != nil {
			t.Fatalf("scan of the cut file: %v", err)
		}
		if again.Raw != sc.Raw || len(again.Marks) != len(sc.Marks) {
			t.Fatalf("cut file scans to raw %d with %d marks, want raw %d with %d", again.Raw, len(again.Marks), sc.Raw, len(sc.Marks))
		}
		for id, seq := range sc.Marks {
			if again.Marks[id] != seq {
				t.Fatalf("instance %x: mark %d after the cut, %d before", id, again.Marks[id], seq)
			}
		}
	})
}
