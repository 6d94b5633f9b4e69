package flow

import "encoding/binary"

// hash returns a 64-bit hash of k (every field).
func (k *Key) hash() uint64 {
	le := binary.LittleEndian
	h := le.Uint64(k.Src[:8]) ^ le.Uint64(k.Src[8:])*0x9e3779b97f4a7c15
	h = mix(h ^ le.Uint64(k.Dst[:8]))
	h = mix(h ^ le.Uint64(k.Dst[8:]) ^ uint64(k.Iface)<<32 ^ uint64(k.VLAN[0])<<16 ^ uint64(k.VLAN[1]))
	return mix(h ^ uint64(k.NVLAN)<<56 ^ uint64(k.Kind)<<48 ^ uint64(k.Proto)<<40 ^ uint64(k.Flags)<<32 ^
		uint64(k.EtherType)<<16 ^ uint64(k.SrcPort)<<24 ^ uint64(k.DstPort))
}

// mix is the splitmix64 finalizer.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// keyIndex maps canonical keys to entries: open addressing with linear
// probing over slots holding an entry's index + 1 (0: empty) and the
// upper half of its hash (so that a probe reads an entry only when that
// matches), at most half full; deletion shifts the probe run back (no
// tombstones). The entries hold the keys and their hashes.
type keyIndex struct {
	slots []slot
	n     int
}

type slot struct {
	i   int32 // entry index + 1; 0: empty
	tag uint32
}

func (x *keyIndex) lookup(entries []entry, k *Key, h uint64) (int32, bool) {
	if len(x.slots) == 0 {
		return 0, false
	}
	mask := uint64(len(x.slots) - 1)
	tag := uint32(h >> 32)
	for s := h & mask; ; s = (s + 1) & mask {
		sl := x.slots[s]
		if sl.i == 0 {
			return 0, false
		}
		if sl.tag == tag {
			if e := &entries[sl.i-1]; e.hash == h && e.ckey == *k {
				return sl.i - 1, true
			}
		}
	}
}

// insert adds entry i, whose hash is h; the key must not be there.
func (x *keyIndex) insert(entries []entry, i int32, h uint64) {
	if 2*(x.n+1) > len(x.slots) {
		x.grow(entries)
	}
	mask := uint64(len(x.slots) - 1)
	s := h & mask
	for x.slots[s].i != 0 {
		s = (s + 1) & mask
	}
	x.slots[s] = slot{i + 1, uint32(h >> 32)}
	x.n++
}

// remove deletes entry i, whose hash is h.
func (x *keyIndex) remove(entries []entry, i int32, h uint64) {
	mask := uint64(len(x.slots) - 1)
	s := h & mask
	for x.slots[s].i != i+1 {
		s = (s + 1) & mask
	}
	// Backward shift: move later members of the run into the hole when
	// their home slot is not between the hole and them.
	for j := (s + 1) & mask; x.slots[j].i != 0; j = (j + 1) & mask {
		home := entries[x.slots[j].i-1].hash & mask
		if (j > s && (home <= s || home > j)) || (j < s && home <= s && home > j) {
			x.slots[s] = x.slots[j]
			s = j
		}
	}
	x.slots[s] = slot{}
	x.n--
}

func (x *keyIndex) grow(entries []entry) {
	old := x.slots
	x.slots = make([]slot, max(64, 2*len(old)))
	x.n = 0
	mask := uint64(len(x.slots) - 1)
	for _, v := range old {
		if v.i != 0 {
			s := entries[v.i-1].hash & mask
			for x.slots[s].i != 0 {
				s = (s + 1) & mask
			}
			x.slots[s] = v
			x.n++
		}
	}
}
