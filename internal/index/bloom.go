package index

import "math/bits"

// Each block's keys are kept as a Bloom filter of bloomBitsPerKey bits
// per distinct key (at least 64 bits) probed bloomProbes times: about
// 0.07% of the blocks that hold none of a query's keys are read all the
// same ((1-e^(-7/16))^7; 10 bits per key gave 0.8%, a third of a needle
// query's reads on realistic traffic, `pcapsync bench query`). A false positive costs a block read, never a wrong answer: the
// reader filters every packet it reads.
//
// A block's filter is also kept within maxFilterShare of the block's
// bytes on disk (at least one word), so that the index stays a small
// part of the data whatever the traffic: a block of many distinct keys
// in few bytes (highly compressed, or short packets of many flows) gets
// fewer bits per key, and fewer probes (probes), and so more false
// positives. Its bytes on disk are the distance to the next block's
// Seek (or, for the last, the data file's size) for plain and gzip
// files and zstd files of a frame per block. The blocks of a zstd file
// of one frame have no offset of their own (and a rebuild could not
// find it): their filters are kept within 1/maxFilterShareZstd of their
// decoded bytes, 2% of the bytes on disk up to 20:1 compression. Such a
// file is decoded from its start whatever its filters say, so they
// save parsing, not reading, and a smaller one costs little.
const (
	bloomBitsPerKey    = 16
	bloomProbes        = 7
	maxFilterShare     = 50   // the filter is at most 1/maxFilterShare (2%) of the block's bytes on disk
	maxFilterShareZstd = 1000 // ... of a one-frame zstd file's block's decoded bytes (0.1%)
)

// bloomWords is the filter size, in 64-bit words, for n keys in a block
// whose filter may take at most limit bytes (0: no bound).
func bloomWords(n int, limit int64) int {
	w := max(1, (n*bloomBitsPerKey+63)/64)
	if limit > 0 && int64(w) > limit/8 {
		w = int(max(1, limit/8))
	}
	return w
}

// probes is the number of probes of a filter of words for n keys:
// bloomProbes at full size, fewer (m/n·ln 2, at least 1) when it was
// cut to fit its share.
func probes(words, n int) uint64 {
	if n == 0 {
		return bloomProbes
	}
	k := uint64(words*64*693/1000) / uint64(n)
	return min(bloomProbes, max(1, k))
}

// bloomAdd sets the bits of key k in the filter f probed p times.
func bloomAdd(f []uint64, k, p uint64) {
	m := uint64(len(f)) * 64
	h1, h2 := k, mix(k)|1
	for i := range p {
		b, _ := bits.Mul64(h1+i*h2, m) // in [0, m), without a division
		f[b/64] |= 1 << (b % 64)
	}
}

// bloomHas reports whether the filter f probed p times may hold key k.
func bloomHas(f []uint64, k, p uint64) bool {
	if len(f) == 0 {
		return false
	}
	m := uint64(len(f)) * 64
	h1, h2 := k, mix(k)|1
	for i := range p {
		b, _ := bits.Mul64(h1+i*h2, m) // in [0, m), without a division
		if f[b/64]&(1<<(b%64)) == 0 {
			return false
		}
	}
	return true
}
