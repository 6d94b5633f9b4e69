package index

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"testing"
)

// Packet builders for the tests: minimal headers, enough for packetKeys.

func ipv4(src, dst string, proto byte, l4 []byte) []byte {
	p := make([]byte, 20, 20+len(l4))
	p[0], p[9] = 0x45, proto
	s, d := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
	copy(p[12:], s[:])
	copy(p[16:], d[:])
	return append(p, l4...)
}

func ipv6(src, dst string, next byte, l4 []byte) []byte {
	p := make([]byte, 40, 40+len(l4))
	p[0], p[6] = 0x60, next
	s, d := netip.MustParseAddr(src).As16(), netip.MustParseAddr(dst).As16()
	copy(p[8:], s[:])
	copy(p[24:], d[:])
	return append(p, l4...)
}

func ports(sp, dp uint16) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint16(b, sp)
	binary.BigEndian.PutUint16(b[2:], dp)
	return b
}

func eth(et uint16, vlans int, payload []byte) []byte {
	p := make([]byte, 12, 14+4*vlans+len(payload))
	for range vlans {
		p = binary.BigEndian.AppendUint16(p, 0x8100)
		p = append(p, 0, 5)
	}
	p = binary.BigEndian.AppendUint16(p, et)
	return append(p, payload...)
}

// blockOf builds one block of the given packets (link type, bytes) and
// parses it back.
func blockOf(t *testing.T, lt uint32, pkts ...[]byte) *Index {
	t.Helper()
	var b Builder
	b.Reset("f.pcapng", CodecNone, 1, 4096, 100, 100)
	for i, p := range pkts {
		b.Add(lt, int64(1000+i), p)
	}
	b.Finish(200, 1, 300, 300)
	ix, err := Parse(b.Pending(), false)
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

func TestPacketKeys(t *testing.T) {
	a4, b4 := netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("192.0.2.7")
	a6, b6 := netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")
	frag := ipv4("10.1.2.3", "192.0.2.7", 17, ports(53, 5353))
	binary.BigEndian.PutUint16(frag[6:], 185)                           // a later fragment: its "ports" are payload
	ext := append([]byte{17, 0, 0, 0, 0, 0, 0, 0}, ports(4000, 443)...) // hop-by-hop, then UDP
	sll := append(make([]byte, 14), 0x08, 0x00)
	tests := []struct {
		name   string
		lt     uint32
		pkt    []byte
		has    []*Match
		hasNot []*Match
	}{
		{"ethernet ipv4 tcp", linkEthernet, eth(0x0800, 0, ipv4("10.1.2.3", "192.0.2.7", 6, ports(40000, 80))),
			[]*Match{Host(a4), Host(b4), Port(40000), Port(80), Proto(6), Host(netip.MustParseAddr("::ffff:10.1.2.3"))},
			[]*Match{Host(a6), Port(443), Proto(17), Port(6)}},
		{"two vlan tags ipv6 udp", linkEthernet, eth(0x86dd, 2, ipv6("2001:db8::1", "2001:db8::2", 17, ports(5353, 53))),
			[]*Match{Host(a6), Host(b6), Port(53), Port(5353), Proto(17)},
			[]*Match{Host(a4), Proto(6)}},
		{"ipv6 extension header", linkRaw, ipv6("2001:db8::1", "2001:db8::2", 0, ext),
			[]*Match{Host(a6), Port(4000), Port(443), Proto(17), Proto(0)}, []*Match{Proto(6)}}, // ip6 proto 0: ip6[6]
		{"later ipv4 fragment", linkIPv4, frag,
			[]*Match{Host(a4), Host(b4), Proto(17)}, []*Match{Port(53), Port(5353)}},
		{"linux cooked", linkSLL, append(sll, ipv4("10.1.2.3", "192.0.2.7", 1, nil)...),
			[]*Match{Host(a4), Proto(1)}, []*Match{Port(0)}},
		{"cut short", linkEthernet, eth(0x0800, 0, ipv4("10.1.2.3", "192.0.2.7", 6, nil))[:30],
			[]*Match{Host(a4), Proto(6)}, []*Match{Host(b4)}}, // libpcap's host matches the source it has
		{"cut before the ip protocol", linkEthernet, eth(0x0800, 0, ipv4("10.1.2.3", "192.0.2.7", 6, nil))[:23],
			nil, []*Match{Host(a4), Proto(6)}},
		{"arp", linkEthernet, eth(0x0806, 0, arp("10.1.2.3", "192.0.2.7")),
			[]*Match{Host(a4), Host(b4)}, []*Match{Proto(0), Host(netip.MustParseAddr("10.0.0.1"))}},
		{"rarp in a vlan", linkEthernet, eth(0x8035, 1, arp("10.1.2.3", "192.0.2.7")), []*Match{Host(a4), Host(b4)}, nil},
		{"arp cut before the target", linkSLL, append(append(make([]byte, 14), 0x08, 0x06), arp("10.1.2.3", "192.0.2.7")[:20]...),
			[]*Match{Host(a4)}, []*Match{Host(b4)}},
		{"not ip", linkEthernet, eth(0x88cc, 0, make([]byte, 28)), nil, []*Match{Proto(0)}},
		{"unknown link type", 147, ipv4("10.1.2.3", "192.0.2.7", 6, ports(1, 2)), // every key: libpcap may read it
			[]*Match{Host(a4), Host(a6), Port(9), Proto(99)}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ix := blockOf(t, tt.lt, tt.pkt)
			for i, m := range tt.has {
				if len(ix.Select(math.MinInt64, math.MaxInt64, m)) != 1 {
					t.Errorf("match %d: the block is not selected", i)
				}
			}
			for i, m := range tt.hasNot {
				if len(ix.Select(math.MinInt64, math.MaxInt64, m)) != 0 {
					t.Errorf("no-match %d: the block is selected", i)
				}
			}
		})
	}
}

// arp is an Ethernet/IPv4 ARP request from sender to target.
func arp(sender, target string) []byte {
	b := make([]byte, 28)
	copy(b, []byte{0, 1, 8, 0, 6, 4, 0, 1})
	copy(b[14:], netip.MustParseAddr(sender).AsSlice())
	copy(b[24:], netip.MustParseAddr(target).AsSlice())
	return b
}

// TestVersions: indexes of versions 1 to 3 are read, and say what
// their filters hold (version 1: no ARP; before WideVersion: not every
// key libpcap matches); versions outside MinVersion..Version are
// refused.
func TestVersions(t *testing.T) {
	good := sample(t)
	ix, err := Parse(good, false)
	if err != nil || ix.Version != Version || !ix.KeysARP() || !ix.KeysWide() {
		t.Fatalf("current version: %v, version %d, keys ARP %v, wide %v", err, ix.Version, ix.KeysARP(), ix.KeysWide())
	}
	for _, v := range []byte{0, 1, 2, 3, 4, Version + 1} {
		ix, err := Parse(withVersion(good, v), false)
		old := v >= MinVersion && v < Version
		switch {
		case old && (err != nil || ix.Version != int(v) || ix.KeysARP() != (v >= 2) || ix.KeysWide() != (v >= WideVersion) || len(ix.All) != 20):
			t.Errorf("version %d: %v, %+v", v, err, ix)
		case old && slices.ContainsFunc(ix.All, func(b Block) bool { return b.Ordered }):
			t.Errorf("version %d: a block is ordered: the bit is version 5's", v)
		case !old && !errors.Is(err, ErrVersion):
			t.Errorf("version %d: %v, want ErrVersion", v, err)
		}
	}
}

// TestOrdered: the builder marks a block ordered when no packet of it
// is earlier than one before it (ties are in order); the flag reads
// back from the index, whole or as a summary, apart from the packet
// count, and Append writes it again.
func TestOrdered(t *testing.T) {
	p := eth(0x0800, 0, ipv4("10.1.2.3", "192.0.2.7", 6, ports(40000, 80)))
	blocks := [][]int64{
		{10, 20, 20, 30}, // in order, with a tie
		{40, 60, 50, 70}, // one packet back
		{80},             // one packet
		{100, 90},        // latest first
		{110, 110, 110},  // all tied
		{120, 130, 125},  // the last back
	}
	want := []bool{true, false, true, false, true, false}
	var b Builder
	b.Reset("o.pcapng", CodecNone, 1, 4096, 0, 0)
	for i, ts := range blocks {
		for _, at := range ts {
			b.Add(linkEthernet, at, p)
		}
		b.EndBlock(int64(100*(i+1)), 1, int64(100*(i+1)))
	}
	b.Finish(int64(100*len(blocks)), 1, int64(100*len(blocks)), int64(100*len(blocks)))
	enc := bytes.Clone(b.Pending())
	ix, err := Parse(enc, false)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := readSummary(bufio.NewReader(bytes.NewReader(enc)), false)
	if err != nil {
		t.Fatal(err)
	}
	for i := range blocks {
		for _, got := range []Block{ix.All[i], sum.All[i]} {
			if got.Ordered != want[i] || got.Packets != len(blocks[i]) {
				t.Errorf("block %d (%v): ordered %v, %d packets; want %v, %d", i, blocks[i], got.Ordered, got.Packets, want[i], len(blocks[i]))
			}
		}
	}
	if again := ix.Append(nil); !bytes.Equal(again, enc) {
		t.Error("Append does not write the index it read")
	}
}

// withVersion returns a copy of the index b with version v, every
// checksum made again.
func withVersion(b []byte, v byte) []byte {
	b = bytes.Clone(b)
	le := binary.LittleEndian
	b[4] = v
	h := headerFixed + int(le.Uint16(b[12:]))
	crc := crc32.Checksum(b[:h], castagnoli)
	le.PutUint32(b[h:], crc)
	for i := h + 4; i+recHead <= len(b); {
		n := recHead + int(le.Uint32(b[i+1:]))
		crc = crc32.Update(crc, castagnoli, b[i:i+n])
		le.PutUint32(b[i+n:], crc)
		i += n + 4
	}
	return b
}

// TestFlowAcrossBlocks: the packets of one flow in consecutive blocks
// put their keys in each block (the flow cache starts over per block).
func TestFlowAcrossBlocks(t *testing.T) {
	p := eth(0x0800, 0, ipv4("10.1.2.3", "192.0.2.7", 6, ports(40000, 80)))
	var b Builder
	b.Reset("f.pcapng", CodecNone, 1, 4096, 0, 0)
	for i := range 3 {
		b.Add(linkEthernet, int64(i), p)
		b.Add(linkEthernet, int64(i), p)
		b.EndBlock(int64(100*(i+1)), 1, int64(100*(i+1)))
	}
	b.Finish(300, 1, 300, 300)
	ix, err := Parse(b.Pending(), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*Match{Host(netip.MustParseAddr("10.1.2.3")), Port(80), Proto(6)} {
		if s := ix.Select(math.MinInt64, math.MaxInt64, m); len(s) != 1 || s[0].N != 3 {
			t.Fatalf("spans %+v, want the 3 blocks", s)
		}
	}
}

// sample is an index of 20 blocks: block i holds packets at times
// [i*100, i*100+90] from host 10.0.0.i to 10.0.1.1 port 1000+i, and
// block 10 describes a new interface.
func sample(t testing.TB) []byte {
	t.Helper()
	var b Builder
	b.Reset("web1_x.pcapng.gz", CodecGzip, 2, 4096, 0, 64)
	raw := int64(64)
	for i := range 20 {
		for k := range 10 {
			b.Add(linkEthernet, int64(i*100+k*10), eth(0x0800, 0, ipv4(netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}).String(), "10.0.1.1", 6, ports(uint16(1000+i), 22))))
		}
		raw += 5000
		ifaces := 2
		if i >= 10 {
			ifaces = 3
		}
		b.EndBlock(raw, ifaces, int64(i*1000+1000))
	}
	b.Finish(raw, 3, 20_500, raw+100)
	return b.Pending()
}

func TestRoundTrip(t *testing.T) {
	ix, err := Parse(sample(t), false)
	if err != nil {
		t.Fatal(err)
	}
	if ix.Name != "web1_x.pcapng.gz" || ix.Codec != CodecGzip || ix.HeadIfaces != 2 || !ix.Final ||
		ix.DataSize != 20_500 || ix.Ifaces != 3 || len(ix.All) != 20 || ix.HeadEnd() != 64 {
		t.Fatalf("index %+v", ix)
	}
	b := ix.All[3]
	if b.Seek != 3000 || b.Raw != 64+3*5000 || b.RawEnd != 64+4*5000 || b.First != 300 || b.Last != 390 || b.Packets != 10 || b.Keys != 5 {
		t.Fatalf("block 3: %+v", b)
	}
	all := int64(math.MaxInt64)
	tests := []struct {
		name         string
		since, until int64
		m            *Match
		want         [][2]int // spans: first block, blocks
	}{
		{"everything", math.MinInt64, all, nil, [][2]int{{0, 20}}},
		{"time inside a block", 305, 306, nil, [][2]int{{3, 1}}},
		{"until is exclusive", 0, 300, nil, [][2]int{{0, 3}}},
		{"since is inclusive", 390, 401, nil, [][2]int{{3, 2}}},
		{"after the end", 2000, all, nil, nil},
		{"one host", math.MinInt64, all, Host(netip.MustParseAddr("10.0.0.4")), [][2]int{{4, 1}}},
		{"host after the new interface: its block comes first", math.MinInt64, all, Host(netip.MustParseAddr("10.0.0.15")), [][2]int{{10, 1}, {15, 1}}},
		{"host or port", math.MinInt64, all, Or(Host(netip.MustParseAddr("10.0.0.4")), Port(1005)), [][2]int{{4, 2}}},
		{"host and port of another block", math.MinInt64, all, And(Host(netip.MustParseAddr("10.0.0.4")), Port(1005)), nil},
		{"host and port", math.MinInt64, all, And(Host(netip.MustParseAddr("10.0.1.1")), Port(22), Proto(6)), [][2]int{{0, 20}}},
		{"host outside the time", 0, 300, Host(netip.MustParseAddr("10.0.0.4")), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got [][2]int
			for _, s := range ix.Select(tt.since, tt.until, tt.m) {
				got = append(got, [2]int{s.Block, s.N})
				first, last := ix.All[s.Block], ix.All[s.Block+s.N-1]
				if s.Seek != first.Seek || s.SeekRaw != first.Raw || s.Raw != first.Raw || s.RawEnd != last.RawEnd || s.First != first.First || s.Last != last.Last {
					t.Errorf("span %+v does not match its blocks", s)
				}
			}
			if len(got) != len(tt.want) || len(got) > 0 && !equalSpans(got, tt.want) {
				t.Fatalf("spans %v, want %v", got, tt.want)
			}
		})
	}
}

func equalSpans(a, b [][2]int) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestDamaged: any flipped bit and any truncation of a finished index
// is refused (by Parse, or by Check for a closed file); read as a file being written, a truncated index yields
// the blocks before the cut.
func TestDamaged(t *testing.T) {
	good := sample(t)
	for i := range len(good) * 8 {
		b := append([]byte(nil), good...)
		b[i/8] ^= 1 << (i % 8)
		if _, err := Parse(b, false); !errors.Is(err, ErrDamaged) && !errors.Is(err, ErrVersion) {
			t.Fatalf("bit %d flipped: %v, want ErrDamaged", i, err)
		}
	}
	ix, _ := Parse(good, false)
	for n := range len(good) {
		if cut, err := Parse(good[:n], false); err == nil {
			if err := cut.Check(ix.Name, ix.DataSize, false); err == nil {
				t.Fatalf("cut at %d of %d bytes: accepted", n, len(good))
			}
		}
		part, err := Parse(good[:n], true)
		if n < headerFixed+len(ix.Name)+4 {
			if err == nil {
				t.Fatalf("cut at %d, in the header: accepted", n)
			}
			continue
		}
		if err != nil || part.Final {
			t.Fatalf("cut at %d as a part: %v (final %v)", n, err, part.Final)
		}
		for i, b := range part.All {
			if b.RawEnd != ix.All[i].RawEnd || b.Keys != ix.All[i].Keys {
				t.Fatalf("cut at %d: block %d differs", n, i)
			}
		}
	}
	other := append([]byte(nil), good...)
	other[4] = Version + 1
	if _, err := Parse(other, false); !errors.Is(err, ErrVersion) {
		t.Fatalf("version %d: %v, want ErrVersion", Version+1, err)
	}
	tests := []struct {
		name string
		data string
		size int64
		live bool
		want error
	}{
		{"its file", "web1_x.pcapng.gz", 20_500, false, nil},
		{"another file", "web1_y.pcapng.gz", 20_500, false, ErrMismatch},
		{"its file, another size", "web1_x.pcapng.gz", 20_499, false, ErrMismatch},
		{"its file, grown while written", "web1_x.pcapng.gz", 30_000, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := ix.Check(tt.data, tt.size, tt.live); !errors.Is(err, tt.want) {
				t.Fatalf("Check = %v, want %v", err, tt.want)
			}
		})
	}
	unfinished, _ := Parse(good[:len(good)-recHead-endSize-4], true)
	if err := unfinished.Check("web1_x.pcapng.gz", 20_500, false); !errors.Is(err, ErrUnfinished) {
		t.Fatalf("a closed file's index without its end: %v, want ErrUnfinished", err)
	}
}

// TestBuilderAllocs: indexing packets and ending blocks allocates
// nothing once the Builder has seen a block as large.
func TestBuilderAllocs(t *testing.T) {
	pkts := make([][]byte, 64)
	for i := range pkts {
		pkts[i] = eth(0x0800, 1, ipv4(netip.AddrFrom4([4]byte{10, 0, byte(i), 1}).String(), "10.9.9.9", 17, ports(uint16(i), 53)))
	}
	var b Builder
	b.Reset("f.pcapng", CodecNone, 1, 4096, 0, 0)
	raw := int64(0)
	round := func() {
		for i, p := range pkts {
			b.Add(linkEthernet, int64(i), p)
		}
		raw += 4096
		b.EndBlock(raw, 1, raw)
		b.Clear()
	}
	round()
	if n := testing.AllocsPerRun(100, round); n != 0 {
		t.Fatalf("%v allocations per block of %d packets, want 0", n, len(pkts))
	}
}

// BenchmarkAdd: indexing one packet, of one flow (the packet before's)
// or of a new source address each time (1024 per block).
func BenchmarkAdd(b *testing.B) {
	for _, flows := range []int{1, 1024} {
		for _, size := range []int{64, 576, 1500} {
			b.Run("flows="+itoa(flows)+"/"+itoa(size), func(b *testing.B) {
				p := eth(0x0800, 0, ipv4("10.0.0.1", "10.0.0.2", 6, append(ports(1234, 80), make([]byte, size-54)...)))
				var bl Builder
				bl.Reset("f.pcapng", CodecNone, 1, 4096, 0, 0)
				b.ReportAllocs()
				b.SetBytes(int64(len(p)))
				for i := 0; b.Loop(); i++ {
					binary.BigEndian.PutUint32(p[14+12:], uint32(i%flows))
					bl.Add(linkEthernet, int64(i), p)
					if i&1023 == 1023 {
						bl.EndBlock(int64(i), 1, 0)
						bl.Clear()
					}
				}
			})
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestFilterShare: a block of many distinct keys in few bytes on disk
// gets a filter within its share of them (maxFilterShare), fewer
// probes, and still every key it holds.
func TestFilterShare(t *testing.T) {
	const hosts, disk = 5000, 100_000
	var b Builder
	b.Reset("f.pcapng.gz", CodecGzip, 1, 4096, 1000, 100)
	for i := range hosts {
		src := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		b.Add(linkEthernet, int64(i), eth(0x0800, 0, ipv4(src.String(), "192.0.2.1", 17, ports(53, 53))))
	}
	b.EndBlock(1_000_000, 1, 1000+disk)
	b.Finish(1_000_000, 1, 1000+disk, 1_000_000)
	ix, err := Parse(b.Pending(), false)
	if err != nil {
		t.Fatal(err)
	}
	blk := ix.All[0]
	if 8*len(blk.filter) > disk/maxFilterShare || len(blk.filter) < disk/maxFilterShare/8-1 {
		t.Fatalf("filter of %d bytes for %d bytes on disk, want at most and about %d", 8*len(blk.filter), disk, disk/maxFilterShare)
	}
	if p := probes(len(blk.filter), blk.Keys); p >= bloomProbes || p < 1 {
		t.Fatalf("%d probes for %d keys in %d bits", p, blk.Keys, 64*len(blk.filter))
	}
	fp := 0
	for i := range hosts {
		if !ix.MayMatch(0, Host(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}))) {
			t.Fatalf("host %d of the block not found", i)
		}
		if ix.MayMatch(0, Host(netip.AddrFrom4([4]byte{11, byte(i >> 16), byte(i >> 8), byte(i)}))) {
			fp++
		}
	}
	if fp > hosts/2 {
		t.Fatalf("%d of %d absent hosts match", fp, hosts)
	}
	t.Logf("%d keys in %d bits, %d probes: %d%% false positives", blk.Keys, 64*len(blk.filter), probes(len(blk.filter), blk.Keys), 100*fp/hosts)
}

// BenchmarkAddIPv6: indexing one IPv6 TCP packet (not cached by flow),
// of one source address or of a new one each time (1024 per block).
func BenchmarkAddIPv6(b *testing.B) {
	for _, flows := range []int{1, 1024} {
		b.Run("flows="+itoa(flows), func(b *testing.B) {
			p := eth(0x86dd, 0, ipv6("2001:db8::1", "2001:db8::2", 6, append(ports(1234, 80), make([]byte, 512)...)))
			var bl Builder
			bl.Reset("f.pcapng", CodecNone, 1, 4096, 0, 0)
			b.ReportAllocs()
			b.SetBytes(int64(len(p)))
			for i := 0; b.Loop(); i++ {
				binary.BigEndian.PutUint32(p[14+20:], uint32(i%flows))
				bl.Add(linkEthernet, int64(i), p)
				if i&1023 == 1023 {
					bl.EndBlock(int64(i), 1, 0)
					bl.Clear()
				}
			}
		})
	}
}
