package query

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/pcapsync/pcapsync/internal/filter"
	"github.com/pcapsync/pcapsync/internal/index"
)

// Frames whose headers are cut short by the snap length or
// inconsistent, which libpcap's host, port and protocol primitives
// still match (issue 24).

// ether is an Ethernet frame of type et carrying payload.
func ether(et uint16, payload ...[]byte) []byte {
	b := []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, byte(et >> 8), byte(et)}
	for _, p := range payload {
		b = append(b, p...)
	}
	return b
}

// hdr4 is an IPv4 header: first byte vihl (version and header length),
// protocol proto, time to live ttl.
func hdr4(vihl, ttl, proto byte, src, dst string) []byte {
	h := make([]byte, 20)
	h[0], h[8], h[9] = vihl, ttl, proto
	copy(h[12:], netip.MustParseAddr(src).AsSlice())
	copy(h[16:], netip.MustParseAddr(dst).AsSlice())
	return h
}

// hdr6 is an IPv6 header whose first byte is v (version, class) and
// next header next.
func hdr6(v, next byte, src, dst string) []byte {
	h := make([]byte, 40)
	h[0], h[6], h[7] = v, next, 64
	copy(h[8:], netip.MustParseAddr(src).AsSlice())
	copy(h[24:], netip.MustParseAddr(dst).AsSlice())
	return h
}

func l4ports(sp, dp uint16) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint16(b, sp)
	binary.BigEndian.PutUint16(b[2:], dp)
	return b
}

// oddFrames are the frames of TestIndexedAsTcpdump, each cut to its
// captured length.
var oddFrames = []struct {
	name string
	data []byte
}{
	{"ipv4 cut after its source", ether(0x0800, hdr4(0x45, 64, 17, "10.7.0.1", "10.7.0.2"))[:14+16]},
	{"tcp cut after its source port", ether(0x0800, hdr4(0x45, 64, 6, "10.7.0.3", "10.7.0.4"), l4ports(4001, 4002))[:14+22]},
	{"ipv6 cut after its source", ether(0x86dd, hdr6(0x60, 17, "fd00::71", "fd00::72"))[:14+24]},
	{"ipv6 fragment header cut", ether(0x86dd, hdr6(0x60, 44, "fd00::73", "fd00::74"), []byte{6, 0, 0, 0})[:14+41]},
	{"0x0800 of version 6", ether(0x0800, hdr4(0x65, 64, 17, "10.7.0.5", "10.7.0.6"), l4ports(4005, 4006))},
	{"0x86dd of version 4", ether(0x86dd, hdr6(0x45, 17, "fd00::75", "fd00::76"), l4ports(4007, 4008))},
	// Header length 2: libpcap's ports are ip[8:2] (time to live 15,
	// protocol 17: 3857) and ip[10:2].
	{"ipv4 header length 2", ether(0x0800, hdr4(0x42, 15, 17, "10.7.0.7", "10.7.0.8"), l4ports(1, 2))},
	{"udp to port 43", ether(0x0800, hdr4(0x45, 64, 17, "10.7.0.9", "10.7.0.10"), l4ports(40000, 43))},
	{"ipv6 fragment", ether(0x86dd, hdr6(0x60, 44, "fd00::77", "fd00::78"), []byte{17, 0, 0, 0, 0, 0, 0, 1}, l4ports(4009, 4010))},
}

// oddFilters select oddFrames, and only them.
var oddFilters = []string{
	"host 10.7.0.1", "ip src host 10.7.0.1", "ip proto 17 and host 10.7.0.1",
	"port 4001", "tcp src port 4001", "host 10.7.0.3 and port 4001",
	"host fd00::71", "ip6 proto 17 and host fd00::71",
	"ip6 proto 6",
	"host 10.7.0.6", "udp port 4005",
	"host fd00::76", "port 4008", "udp dst port 4008",
	"udp port 3857",
	"port 053", "udp port 0x2b", "dst port 00053",
	"ip6 proto 054", "ip6 proto 0x2c and udp",
}

// oddCapture writes agent a1's one plain data file, with 4 KiB index
// blocks, below dir: oddFrames among frames that none of oddFilters
// selects, each in a block of its own.
func oddCapture(t *testing.T) (dir, file string) {
	t.Helper()
	dir = t.TempDir()
	var batches [][]tp
	for b := range 3 + 2*len(oddFrames) {
		var batch []tp
		for i := range 50 {
			k := int64(b*50 + i)
			batch = append(batch, tp{ts: k * 10_000, iface: b % 2, port: uint16(5000 + k%4)})
		}
		if b >= 3 && b%2 == 1 {
			batch[10].data = oddFrames[(b-3)/2].data
		}
		batches = append(batches, batch)
	}
	writeAgent(t, dir, agentSpec{name: "a1", ixBlock: 4096, batches: batches}, 0)
	return dir, onlyFile(t, dir, "a1", "*.pcapng")
}

// TestOldIndexTimeOnly: the filters of an index of a version before
// index.WideVersion may miss packets libpcap matches: the query reads
// such a file through its index by time only, never skipping a block
// for its keys.
func TestOldIndexTimeOnly(t *testing.T) {
	dir, file := oddCapture(t)
	cfg := Config{Dir: dir, Filter: "ip host 10.7.0.9", Since: ts(-1e9)}
	want, res, err := runQuery(t, cfg)
	if err != nil || res.Packets != 1 || res.BlocksSkipped == 0 {
		t.Fatalf("current index: %v, %s", err, res)
	}
	b, err := os.ReadFile(index.Path(file))
	if err != nil {
		t.Fatal(err)
	}
	ix, err := index.Parse(b, false)
	if err != nil {
		t.Fatal(err)
	}
	ix.Version = index.WideVersion - 1
	if err := os.WriteFile(index.Path(file), ix.Append(nil), 0o640); err != nil {
		t.Fatal(err)
	}
	got, res, err := runQuery(t, cfg)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("old index: %v, %d bytes, want %d", err, len(got), len(want))
	}
	if res.FilesIndexed != 1 || res.BlocksSkipped != 0 {
		t.Errorf("old index: %s; want the file read through its index, no block skipped", res)
	}
}

// TestIndexedAsTcpdump: a query through the index returns the packets
// tcpdump -r and a query without the index return, for frames whose
// headers are cut short or inconsistent and filters with octal and hex
// numbers (issue 24, classes 3 and 4): each such frame sits in a block
// of its own among others that none of the filters selects.
func TestIndexedAsTcpdump(t *testing.T) {
	tcpdump, err := exec.LookPath("tcpdump")
	if err != nil {
		t.Skip("no tcpdump:", err)
	}
	dir, file := oddCapture(t)
	for _, f := range oddFilters {
		t.Run(f, func(t *testing.T) {
			out, err := exec.Command(tcpdump, "-r", file, "-nn", "-tt", "--time-stamp-precision=nano", f).Output()
			if err != nil {
				t.Fatalf("tcpdump: %v", err)
			}
			var want []string
			for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				if l != "" {
					want = append(want, strings.Fields(l)[0])
				}
			}
			if len(want) == 0 {
				t.Fatal("tcpdump selects nothing: the test proves nothing")
			}
			var scanned []byte
			for _, noIndex := range []bool{true, false} {
				b, res, err := runQuery(t, Config{Dir: dir, Filter: f, Since: ts(-1e9), NoIndex: noIndex})
				if err != nil {
					t.Fatal(err)
				}
				pkts, _, _ := readOutput(t, b)
				var got []string
				for _, p := range pkts {
					got = append(got, fmt.Sprintf("%d.%09d", p.TS/1e9, p.TS%1e9))
				}
				if !slices.Equal(got, want) {
					t.Errorf("no index %v: packets at %q (%s), tcpdump: %q", noIndex, got, res, want)
				}
				if noIndex {
					scanned = b
					continue
				}
				if !bytes.Equal(b, scanned) {
					t.Errorf("indexed: %d bytes, without the index: %d", len(b), len(scanned))
				}
				if res.FilesIndexed != 1 || res.BlocksSkipped == 0 {
					t.Errorf("the index was not used or skipped nothing: %s", res)
				}
			}
		})
	}
}

// linkHeader is the link header of link type lt before a network
// packet of ethertype et (nil for the link types without one).
func linkHeader(rng *rand.Rand, lt uint32, et uint16) []byte {
	fam := uint32(2)
	if et == 0x86dd {
		fam = []uint32{10, 24, 28, 30}[rng.IntN(4)]
	}
	switch lt {
	case 1:
		return ether(et)
	case 113:
		return append(make([]byte, 14), byte(et>>8), byte(et))
	case 276:
		return append([]byte{byte(et >> 8), byte(et)}, make([]byte, 18)...)
	case 0:
		return binary.LittleEndian.AppendUint32(nil, fam)
	case 108:
		return binary.BigEndian.AppendUint32(nil, fam)
	case 105: // 802.11, which the index does not read: a data frame, LLC/SNAP
		return append(append([]byte{0x08, 0}, make([]byte, 22)...), 0xaa, 0xaa, 3, 0, 0, 0, byte(et>>8), byte(et))
	}
	return nil
}

// oddPacket is a random packet of link type lt: IPv4, IPv6 or ARP of
// the test addresses, ports and protocols, often cut short, with its
// headers' fields often inconsistent (version nibble, header length,
// next header) or bytes overwritten at random.
func oddPacket(rng *rand.Rand, lt uint32) []byte {
	be := binary.BigEndian
	v4 := func() string { return testV4[rng.IntN(len(testV4))] }
	v6 := func() string { return testV6[rng.IntN(len(testV6))] }
	pt := func() uint16 { return testPt[rng.IntN(len(testPt))] + uint16(rng.IntN(2)) }
	protos := []byte{6, 17, 132, 1, 58, 47, 0, 44, 43, 60, 51}
	proto := protos[rng.IntN(len(protos))]
	var et uint16
	var p []byte
	switch k := rng.IntN(7); {
	case lt == 228 || lt != 229 && k < 3:
		et = 0x0800
		p = hdr4(0x45, 64, proto, v4(), v4())
		if rng.IntN(4) == 0 {
			p[0] = 0x40 | byte(rng.IntN(16)) // any header length
		}
		if rng.IntN(6) == 0 {
			be.PutUint16(p[6:], 100) // a later fragment
		}
		p = append(p, l4ports(pt(), pt())...)
	case lt == 229 || k < 6:
		et = 0x86dd
		p = hdr6(0x60, proto, v6(), v6())
		switch rng.IntN(3) {
		case 0:
			p[6] = []byte{0, 43, 60}[rng.IntN(3)]
			p = append(p, proto, 0, 0, 0, 0, 0, 0, 0)
		case 1:
			p[6] = 44
			p = append(p, proto, 0, 0, byte(rng.IntN(2)*8), 0, 0, 0, 1)
		}
		p = append(p, l4ports(pt(), pt())...)
	default:
		et = []uint16{0x0806, 0x8035}[rng.IntN(2)]
		p = make([]byte, 28)
		copy(p, []byte{0, 1, 8, 0, 6, 4, 0, 1})
		copy(p[14:], netip.MustParseAddr(v4()).AsSlice())
		copy(p[24:], netip.MustParseAddr(v4()).AsSlice())
	}
	if rng.IntN(4) == 0 && len(p) > 0 {
		p[0] = p[0]&0x0f | []byte{0x40, 0x60, 0x00, 0xf0}[rng.IntN(4)] // the version nibble of another
	}
	if rng.IntN(8) == 0 && (lt == 1 || lt == 113 || lt == 276) {
		et = []uint16{0x0800, 0x86dd}[rng.IntN(2)] // the other network layer's type
	}
	b := append(linkHeader(rng, lt, et), p...)
	for range rng.IntN(3) {
		b[rng.IntN(len(b))] = byte(rng.Uint32())
	}
	if rng.IntN(2) == 0 {
		b = b[:rng.IntN(len(b)+1)] // cut by the snap length
	}
	return b
}

// pcapNum formats n as libpcap reads numbers: decimal, octal or hex.
func pcapNum(rng *rand.Rand, n int) string {
	switch rng.IntN(3) {
	case 0:
		return fmt.Sprintf("0%o", n)
	case 1:
		return fmt.Sprintf("0x%x", n)
	}
	return fmt.Sprint(n)
}

// oddFilter is a random filter of the primitives the index answers,
// numbers in decimal, octal and hex, with and, or and not.
func oddFilter(rng *rand.Rand, depth int) string {
	if depth == 0 || rng.IntN(3) == 0 {
		prims := []func() string{
			func() string { return randFilter(rng, 0) },
			func() string {
				return fmt.Sprintf("%sport %s", []string{"", "tcp ", "udp ", "sctp ", "src ", "dst "}[rng.IntN(6)], pcapNum(rng, int(testPt[rng.IntN(3)])+rng.IntN(2)))
			},
			func() string {
				return fmt.Sprintf("%s proto %s", []string{"ip", "ip6"}[rng.IntN(2)], pcapNum(rng, []int{6, 17, 132, 1, 58, 0, 44, 43, 60, 51}[rng.IntN(10)]))
			},
			func() string { return []string{"tcp", "udp", "sctp", "icmp", "icmp6"}[rng.IntN(5)] },
		}
		return prims[rng.IntN(len(prims))]()
	}
	if rng.IntN(5) == 0 {
		return "not " + oddFilter(rng, depth-1)
	}
	return "(" + oddFilter(rng, depth-1) + []string{" and ", " or "}[rng.IntN(2)] + oddFilter(rng, depth-1) + ")"
}

// TestIndexNeverNarrower: for random packets of every link type the
// index reads (and 802.11, which it does not), cut short and corrupted
// at random, and random filters with numbers in any base, a packet
// libpcap's program accepts is in a block the filter's Match selects
// (issue 24).
func TestIndexNeverNarrower(t *testing.T) {
	rng := rand.New(rand.NewPCG(24, 3))
	links := []uint32{1, 113, 276, 0, 108, 101, 12, 228, 229, 105}
	const per = 150
	type pkt struct {
		lt   uint32
		data []byte
	}
	var pkts []pkt
	var b index.Builder
	b.Reset("x.pcapng", index.CodecNone, len(links), 1, 0, 0)
	for _, lt := range links {
		for range per {
			p := pkt{lt, oddPacket(rng, lt)}
			b.Add(lt, int64(len(pkts)), p.data)
			pkts = append(pkts, p)
			b.EndBlock(int64(len(pkts)), len(links), int64(len(pkts)))
		}
	}
	b.Finish(int64(len(pkts)), len(links), int64(len(pkts)), int64(len(pkts)))
	ix, err := index.Parse(b.Pending(), false)
	if err != nil || len(ix.All) != len(pkts) {
		t.Fatalf("index: %v, %d blocks", err, len(ix.All))
	}
	filters, checked, skipped := 0, 0, 0
	for range 600 {
		f := oddFilter(rng, 3)
		flt, err := filter.New(f)
		if err != nil {
			continue
		}
		filters++
		m := filterTerms(f).indexMatch(false)
		for i, p := range pkts {
			if !ix.MayMatch(i, m) {
				skipped++
			}
			if ok, _ := flt.Match(uint16(p.lt), p.data, uint32(len(p.data))); !ok {
				continue
			}
			checked++
			if !ix.MayMatch(i, m) {
				t.Fatalf("filter %q (terms %s) accepts packet %d of link type %d (% x), its block is not selected",
					f, filterTerms(f), i, p.lt, p.data[:min(len(p.data), 80)])
			}
		}
	}
	t.Logf("%d filters, %d accepted packets checked, %d blocks skipped", filters, checked, skipped)
	if filters < 300 || checked < 5000 || skipped < 10000 {
		t.Fatalf("too few cases: %d filters, %d packets accepted, %d blocks skipped", filters, checked, skipped)
	}
}
