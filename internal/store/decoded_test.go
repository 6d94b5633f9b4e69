package store

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// TestWriteDecoded: batches written from their decoded records
// (WriteDecoded, as the collector writes most batches) make the same
// files, byte for byte, as the same batches decoded while written
// (WriteBatch): the data file, its index and its flow records. A count
// of decoded records other than the batch's is refused, nothing written.
func TestWriteDecoded(t *testing.T) {
	files := func(decoded bool) map[string][]byte {
		cfg := Config{RotateInterval: -1}
		c := newCore(t, cfg)
		s, _, err := c.Begin(hello("fc", 1), func() {})
		if err != nil {
			t.Fatal(err)
		}
		s.decoded = decoded
		var sent [][]byte
		for seq := uint64(1); seq <= 20; seq++ {
			if _, err := s.Batch(0, imixBatch(seq, int(seq-1)*300, 300, seq%2 == 0, &sent)); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		s.End(true)
		// By what follows the name's time (the wall clock's at the
		// file's opening): .pcapng, its index, its flows, its timeline.
		out := map[string][]byte{}
		dir := filepath.Join(c.Dir(), "fc")
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			out[e.Name()[strings.Index(e.Name(), ".pcapng"):]] = b
		}
		return out
	}
	a, b := files(false), files(true)
	if len(a) < 3 || len(a) != len(b) {
		t.Fatalf("files %d and %d", len(a), len(b))
	}
	for kind, data := range a {
		switch kind {
		case ".pcapng" + index.Suffix:
			// It names its data file, whose name has the wall clock's
			// time in it: compared as read.
			ia, erra := index.Parse(data, false)
			ib, errb := index.Parse(b[kind], false)
			if erra != nil || errb != nil {
				t.Fatal(erra, errb)
			}
			ia.Name, ib.Name = "", ""
			if !reflect.DeepEqual(ia, ib) {
				t.Errorf("the indexes differ: %+v and %+v", ia, ib)
			}
		case ".pcapng.timeline":
			// Also names its data file; derived from the index.
		default:
			if !bytes.Equal(data, b[kind]) {
				t.Errorf("the %s files differ (%d and %d bytes)", kind, len(data), len(b[kind]))
			}
		}
	}

	c := newCore(t, Config{RotateInterval: -1})
	s, _, err := c.Begin(hello("fc", 1), func() {})
	if err != nil {
		t.Fatal(err)
	}
	bt, err := wire.ParseBatch(0, imixBatch(1, 0, 10, false, new([][]byte)), wire.BatchLimits{Unchecked: true})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := bt.Decode(uint32(len(s.ifmap)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.WriteDecoded(&bt, recs[:9], s.ifmap, s.inst); err == nil {
		t.Error("WriteDecoded took 9 records of a batch of 10")
	}
}
