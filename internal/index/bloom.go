package index

// Each block's keys are kept as a Bloom filter of bloomBitsPerKey bits
// per distinct key (at least 64 bits) probed bloomProbes times: about
// 1% of the blocks that hold none of a query's keys are read all the
// same. A false positive costs a block read, never a wrong answer: the
// reader filters every packet it reads.
const (
	bloomBitsPerKey = 10
	bloomProbes     = 7
)

// bloomWords is the filter size, in 64-bit words, for n keys.
func bloomWords(n int) int {
	return max(1, (n*bloomBitsPerKey+63)/64)
}

// bloomAdd sets the bits of key k in the filter f.
func bloomAdd(f []uint64, k uint64) {
	m := uint64(len(f)) * 64
	h1, h2 := k, mix(k)|1
	for i := range uint64(bloomProbes) {
		b := (h1 + i*h2) % m
		f[b/64] |= 1 << (b % 64)
	}
}

// bloomHas reports whether the filter f may hold key k.
func bloomHas(f []uint64, k uint64) bool {
	if len(f) == 0 {
		return false
	}
	m := uint64(len(f)) * 64
	h1, h2 := k, mix(k)|1
	for i := range uint64(bloomProbes) {
		b := (h1 + i*h2) % m
		if f[b/64]&(1<<(b%64)) == 0 {
			return false
		}
	}
	return true
}
