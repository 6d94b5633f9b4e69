package wire

import (
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// TestCRCJoin: the checksum of a then b, joined from theirs, is the
// checksum of the two together, for lengths from 0 to past a batch.
func TestCRCJoin(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 9<<20)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	lengths := []int{0, 1, 2, 3, 4, 7, 8, 24, 63, 64, 65, 4095, 65536, 1 << 20, 8<<20 + 13}
	for range 200 {
		lengths = append(lengths, rng.IntN(len(buf)/2))
	}
	for _, nb := range lengths {
		na := rng.IntN(len(buf) - nb + 1)
		if na > 4096 {
			na = rng.IntN(4096)
		}
		a, b := buf[:na], buf[na:na+nb]
		want := crc32.Checksum(buf[:na+nb], castagnoli)
		if got := crcJoin(crc32.Checksum(a, castagnoli), crc32.Checksum(b, castagnoli), nb); got != want {
			t.Fatalf("join of %d and %d bytes: %08x, want %08x", na, nb, got, want)
		}
	}
}

// TestEncoderSumsAsItGoes: a batch the encoder summed piece by piece as
// records came has the checksum of the whole payload, for batches of
// one record to many sumStep pieces, finished more than once, after
// Records (a compressor's look) and after Reset.
func TestEncoderSumsAsItGoes(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var e BatchEncoder
	buf := make([]byte, 0, 4<<20)
	for round := range 60 {
		e.Reset(buf)
		n := 1 + rng.IntN(3000)
		if round%10 == 0 {
			n = 1
		}
		ts := int64(1_700_000_000_000_000_000)
		for range n {
			data := make([]byte, rng.IntN(1600))
			for i := range data {
				data[i] = byte(rng.Uint32())
			}
			ts += int64(rng.IntN(1000))
			e.Append(ts, 0, uint32(len(data))+uint32(rng.IntN(2)), data)
		}
		if round%3 == 0 {
			e.Records()
		}
		for seq := uint64(1); seq <= 2; seq++ {
			f := e.Finish(seq)
			p := f[HeaderSize:]
			if got, want := binary.LittleEndian.Uint32(p[24:]), batchCRC(p); got != want {
				t.Fatalf("round %d (%d records, %d bytes), seq %d: checksum %08x, the payload's %08x", round, n, len(p), seq, got, want)
			}
			b, err := ParseBatch(f[3], p, BatchLimits{})
			if err == nil {
				err = b.Validate(1)
			}
			if err != nil || b.Seq != seq || b.Count != uint32(n) {
				t.Fatalf("round %d: %+v, %v", round, b, err)
			}
		}
	}
}
