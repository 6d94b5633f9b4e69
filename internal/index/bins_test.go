package index

import (
	"bytes"
	"testing"
)

// binsSample is the summary of sample's index (a data file of 1 MiB).
func binsSample(t testing.TB) []byte {
	ix, err := Parse(sample(t), false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := BuildBins(ix, 1<<20, 4096)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzBins: a summary is hostile; ParseBins never panics, and what it
// accepts encodes back to the same bytes.
func FuzzBins(f *testing.F) {
	good := binsSample(f)
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add([]byte(binsMagic))
	f.Fuzz(func(t *testing.T, p []byte) {
		b, err := ParseBins(p)
		if err != nil {
			return
		}
		if got := b.encode(); !bytes.Equal(got, p) {
			t.Fatalf("accepted %x, encodes back as %x", p, got)
		}
	})
}

// TestBinsSums: a summary's bins hold every packet of its index's
// blocks, and its block counts.
func TestBinsSums(t *testing.T) {
	ix, err := Parse(sample(t), false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseBins(binsSample(t))
	if err != nil {
		t.Fatal(err)
	}
	var pk, firsts, lasts, want int64
	for _, c := range b.Bin {
		pk, firsts, lasts = pk+c.Packets, firsts+c.Firsts, lasts+c.Lasts
	}
	for _, bl := range ix.All {
		want += int64(bl.Packets)
	}
	if pk != want || firsts != int64(b.Blocks) || lasts != int64(b.Blocks) || b.Name != ix.Name {
		t.Fatalf("bins hold %d packets of %d, %d and %d blocks of %d", pk, want, firsts, lasts, b.Blocks)
	}
}
