package query

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// A query promises the packets tcpdump -r FILE FILTER gives. These
// tests write the same packets through a store and into a pcap file,
// and compare the query's result with the real tcpdump's, filter by
// filter, for what libpcap reads differently from a naive filter: the
// original length (len, less, greater), BSD null and loop headers in
// either byte order, numbers with a leading 0, and filters valid only
// for some link types.

// rawPkt is a test packet: captured bytes and length on the wire.
type rawPkt struct {
	data []byte
	orig uint32
}

func whole(b []byte) rawPkt { return rawPkt{b, uint32(len(b))} }

func ipv4UDP(src, dst [4]byte, dport uint16, payload int) []byte {
	b := make([]byte, 28+payload)
	b[0], b[8], b[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	copy(b[12:], src[:])
	copy(b[16:], dst[:])
	binary.BigEndian.PutUint16(b[20:], 4000)
	binary.BigEndian.PutUint16(b[22:], dport)
	binary.BigEndian.PutUint16(b[24:], uint16(8+payload))
	return b
}

// ipv6UDP is an IPv6 UDP packet from ::1 to ::2; with hbh, behind a
// hop-by-hop options header.
func ipv6UDP(dport uint16, hbh bool) []byte {
	b := make([]byte, 40, 80)
	b[0], b[6], b[7] = 0x60, 17, 64
	b[23], b[39] = 1, 2
	if hbh {
		b[6] = 0
		b = append(b, 17, 0, 1, 4, 0, 0, 0, 0)
	}
	u := make([]byte, 12)
	binary.BigEndian.PutUint16(u, 4000)
	binary.BigEndian.PutUint16(u[2:], dport)
	binary.BigEndian.PutUint16(u[4:], 12)
	b = append(b, u...)
	binary.BigEndian.PutUint16(b[4:], uint16(len(b)-40))
	return b
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func u32(order binary.AppendByteOrder, v uint32) []byte { return order.AppendUint32(nil, v) }

// sll is a Linux cooked (v1) header of the packet type (0: to us, 4:
// sent by us).
func sll(pktType uint16, p []byte) []byte {
	h := make([]byte, 16)
	binary.BigEndian.PutUint16(h, pktType)
	binary.BigEndian.PutUint16(h[2:], 1)
	binary.BigEndian.PutUint16(h[4:], 6)
	binary.BigEndian.PutUint16(h[14:], 0x0800)
	return cat(h, p)
}

// sll2 is a Linux cooked v2 header for the interface index.
func sll2(ifindex uint32, pktType byte, p []byte) []byte {
	h := make([]byte, 20)
	binary.BigEndian.PutUint16(h, 0x0800)
	binary.BigEndian.PutUint32(h[4:], ifindex)
	binary.BigEndian.PutUint16(h[8:], 1)
	h[10], h[11] = pktType, 6
	return cat(h, p)
}

// wlanData is an 802.11 data frame carrying p (LLC/SNAP, IPv4).
func wlanData(p []byte) []byte {
	h := make([]byte, 24)
	h[0], h[1] = 0x08, 0x02
	return cat(h, []byte{0xaa, 0xaa, 3, 0, 0, 0, 8, 0}, p)
}

var (
	hostA = [4]byte{10, 0, 0, 1}
	hostB = [4]byte{10, 0, 0, 2}
	bcast = [4]byte{255, 255, 255, 255}
)

// nullPkts are BSD null (or, bigEndian with loop, loop) packets: IPv4,
// then IPv6 under each AF_INET6 of BSD, Linux, FreeBSD, Darwin.
func nullPkts(order binary.AppendByteOrder) []rawPkt {
	ps := []rawPkt{whole(cat(u32(order, 2), ipv4UDP(hostA, hostB, 7, 10)))}
	for _, af := range []uint32{24, 10, 28, 30} {
		ps = append(ps, whole(cat(u32(order, af), ipv6UDP(uint16(af), false))))
	}
	return ps
}

// tcpCase is a link type and file byte order, packets and filters.
type tcpCase struct {
	name      string
	linkType  uint16
	bigEndian bool
	pkts      []rawPkt
	filters   []string
}

// tcpdumpCases: per link type and file byte order, packets and filters.
var tcpdumpCases = []tcpCase{
	{
		name: "ethernet", linkType: 1,
		pkts: []rawPkt{
			{ether(0x0800, ipv4UDP(hostA, hostB, 43, 1400))[:96], 1442}, // cut to 96 bytes
			whole(ether(0x0800, ipv4UDP(hostA, hostB, 7, 60))),
			whole(ether(0x0800, ipv4UDP(hostA, bcast, 67, 20))),
			whole(ether(0x86dd, ipv6UDP(43, true))),
			whole(ether(0x86dd, ipv6UDP(44, false))),
		},
		filters: []string{
			"less 100", "greater 1000", "len >= 1442", "len < 200", "len - 40 > 1000",
			"udp port 053", "port 0x2b", "ip[9] = 021",
			"ip broadcast", "ip6 protochain 17", "ip6 protochain 0", "ip6 and udp",
			"inbound", "ifindex 3", "wlan type data",
		},
	},
	{name: "null little-endian", linkType: 0, pkts: nullPkts(binary.LittleEndian),
		filters: []string{"ip", "ip6", "host 10.0.0.1", "ip6 host ::2", "udp port 28", "not ip"}},
	{name: "null big-endian", linkType: 0, bigEndian: true, pkts: nullPkts(binary.BigEndian),
		filters: []string{"ip", "ip6", "host 10.0.0.1", "ip6 host ::2", "udp port 28", "not ip"}},
	{name: "loop", linkType: 108, bigEndian: true, pkts: nullPkts(binary.BigEndian),
		filters: []string{"ip", "ip6", "host 10.0.0.1", "ip6 host ::2", "udp port 28", "not ip"}},
	{
		name: "linux cooked", linkType: 113,
		pkts: []rawPkt{
			whole(sll(0, ipv4UDP(hostA, hostB, 7, 10))),
			whole(sll(4, ipv4UDP(hostB, hostA, 8, 10))),
			{sll(0, ipv4UDP(hostA, hostB, 9, 900))[:60], 944},
		},
		filters: []string{"inbound", "outbound", "udp port 8", "greater 500", "ifindex 3"},
	},
	{
		name: "linux cooked v2", linkType: 276,
		pkts: []rawPkt{
			whole(sll2(3, 0, ipv4UDP(hostA, hostB, 7, 10))),
			whole(sll2(4, 4, ipv4UDP(hostB, hostA, 8, 10))),
		},
		filters: []string{"ifindex 3", "ifindex 04", "inbound", "outbound", "host 10.0.0.2"},
	},
	{
		name: "802.11", linkType: 105,
		pkts: []rawPkt{
			whole(wlanData(ipv4UDP(hostA, hostB, 7, 10))),
			whole(append([]byte{0x80, 0}, make([]byte, 40)...)), // a beacon
		},
		filters: []string{"wlan type data", "wlan type mgt", "ip", "udp port 7", "inbound"},
	},
}

// TestFilterAsTcpdump: for each case and filter, the query gives the
// packets tcpdump -r gives on a pcap file of the same packets, link
// type and byte order; where tcpdump refuses the filter for that file,
// the query, whose selection holds that link type alone, refuses it
// with libpcap's message.
func TestFilterAsTcpdump(t *testing.T) {
	tcpdump := lookTcpdump(t)
	for _, c := range tcpdumpCases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeLinkAgent(t, dir, "a1", c.linkType, c.pkts)
			file := filepath.Join(t.TempDir(), "in.pcap")
			writePcap(t, file, c.linkType, c.bigEndian, c.pkts)
			for _, f := range c.filters {
				want, terr := runTcpdump(t, tcpdump, file, f)
				out, res, err := runQuery(t, Config{Dir: dir, Filter: f})
				if terr != nil {
					// Refused for the one link type selected: refused,
					// with libpcap's message, as tcpdump -r refuses.
					if !errors.Is(err, ErrBadFilter) || !strings.Contains(terr.Error(), strings.TrimPrefix(err.Error(), "filter: capture: compiling filter "+strconv.Quote(f)+": ")) {
						t.Errorf("filter %q: query: %v, want refused as tcpdump -r refuses it: %v", f, err, terr)
					}
					continue
				}
				if err != nil {
					t.Errorf("filter %q: query: %v (tcpdump: %d packets)", f, err, len(want))
					continue
				}
				if res.FilterRefused != 0 {
					t.Errorf("filter %q: query's FilterRefused %d, tcpdump takes it", f, res.FilterRefused)
				}
				gotP, _, _ := readOutput(t, out)
				if len(gotP) != len(want) {
					t.Errorf("filter %q: query gives %d packets, tcpdump -r %d (tcpdump: %v)", f, len(gotP), len(want), terr)
					continue
				}
				for i := range want {
					if !bytes.Equal(gotP[i].Data, want[i].data) || gotP[i].Orig != want[i].orig {
						t.Errorf("filter %q: packet %d: query % x (len %d), tcpdump % x (len %d)", f, i, gotP[i].Data, gotP[i].Orig, want[i].data, want[i].orig)
					}
				}
			}
		})
	}
}

// TestFilterRefusedForSomeLinkTypes: a filter libpcap takes for one
// link type of the selection and refuses for another ("inbound": Linux
// cooked, not Ethernet) is run: the cooked agent's packets pass as
// tcpdump -r passes them, the Ethernet interface passes none and is
// counted in FilterRefused. Selecting the Ethernet agent alone refuses
// it, as tcpdump -r on its file does.
func TestFilterRefusedForSomeLinkTypes(t *testing.T) {
	tcpdump := lookTcpdump(t)
	ci, ei := -1, -1
	for i, c := range tcpdumpCases {
		switch c.name {
		case "linux cooked":
			ci = i
		case "ethernet":
			ei = i
		}
	}
	if ci < 0 || ei < 0 {
		t.Fatal("the cases this test takes its packets from are gone")
	}
	cooked, eth := tcpdumpCases[ci], tcpdumpCases[ei]
	dir := t.TempDir()
	writeLinkAgent(t, dir, "a1", eth.linkType, eth.pkts)
	writeLinkAgent(t, dir, "a2", cooked.linkType, cooked.pkts)
	file := filepath.Join(t.TempDir(), "cooked.pcap")
	writePcap(t, file, cooked.linkType, cooked.bigEndian, cooked.pkts)
	want, terr := runTcpdump(t, tcpdump, file, "inbound")
	if terr != nil || len(want) == 0 {
		t.Fatalf("tcpdump -r: %d packets, %v: want some", len(want), terr)
	}
	out, res, err := runQuery(t, Config{Dir: dir, Filter: "inbound"})
	if err != nil {
		t.Fatalf("both agents: %v", err)
	}
	if got, _, _ := readOutput(t, out); len(got) != len(want) || res.FilterRefused != 1 {
		t.Errorf("both agents: %d packets, FilterRefused %d: want %d and 1", len(got), res.FilterRefused, len(want))
	}
	if _, _, err := runQuery(t, Config{Dir: dir, Agents: []string{"a1"}, Filter: "inbound"}); !errors.Is(err, ErrBadFilter) ||
		!strings.Contains(err.Error(), "not supported on Ethernet") {
		t.Errorf("the Ethernet agent alone: %v, want libpcap's refusal", err)
	}
}

// TestFilterRefusedAsLibpcap: a filter libpcap refuses for every link
// type is refused with libpcap's message, the one tcpdump prints.
func TestFilterRefusedAsLibpcap(t *testing.T) {
	tcpdump := lookTcpdump(t)
	file := filepath.Join(t.TempDir(), "in.pcap")
	writePcap(t, file, 1, false, nil)
	for _, f := range []string{"port 70000", "udp port 09", "ip proto", "host 300.1.2.3 and"} {
		_, terr := runTcpdump(t, tcpdump, file, f)
		if terr == nil {
			t.Fatalf("tcpdump accepts %q", f)
		}
		_, err := Prepare(context.Background(), Config{Dir: t.TempDir(), Filter: f})
		if !errors.Is(err, ErrBadFilter) || !strings.Contains(err.Error(), terr.Error()) {
			t.Errorf("filter %q: Prepare: %v, want ErrBadFilter with tcpdump's message %q", f, err, terr)
		}
	}
}

// TestFilterRefusedForTheSelection: a filter libpcap refuses for every
// link type pcapsync meets, for different reasons per link type (mpls
// with sctp and ICMPv6 on Ethernet: "expression rejects all packets";
// on Linux cooked: "no MPLS support"), is refused with the message of
// the link type of the files selected, tcpdump -r's on them.
func TestFilterRefusedForTheSelection(t *testing.T) {
	tcpdump := lookTcpdump(t)
	const f = "(sctp dst port 123) and ((mpls) and (ip6 proto 58))"
	ci := slices.IndexFunc(tcpdumpCases, func(c tcpCase) bool { return c.name == "linux cooked" })
	if ci < 0 {
		t.Fatal("the case this test takes its packets from is gone")
	}
	cooked := tcpdumpCases[ci]
	dir := t.TempDir()
	writeLinkAgent(t, dir, "a2", cooked.linkType, cooked.pkts)
	file := filepath.Join(t.TempDir(), "cooked.pcap")
	writePcap(t, file, cooked.linkType, cooked.bigEndian, cooked.pkts)
	_, terr := runTcpdump(t, tcpdump, file, f)
	if terr == nil || strings.Contains(terr.Error(), "rejects all packets") {
		t.Fatalf("tcpdump -r on the cooked file: %v, want a refusal other than Ethernet's", terr)
	}
	_, err := Prepare(context.Background(), Config{Dir: dir, Filter: f})
	if !errors.Is(err, ErrBadFilter) || !strings.Contains(err.Error(), terr.Error()) {
		t.Errorf("Prepare: %v, want ErrBadFilter with tcpdump's message %q", err, terr)
	}
	// No file selected: Ethernet's message, as before.
	_, err = Prepare(context.Background(), Config{Dir: t.TempDir(), Filter: f})
	if !errors.Is(err, ErrBadFilter) || !strings.Contains(err.Error(), "rejects all packets") {
		t.Errorf("Prepare over an empty root: %v, want Ethernet's refusal", err)
	}
}

func lookTcpdump(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("tcpdump")
	if err != nil {
		t.Skip("tcpdump not installed: the reference these tests compare with (apt-get install tcpdump)")
	}
	return p
}

// runTcpdump runs tcpdump -r file -w - filter and returns the packets
// it writes, or its message when it refuses the filter.
func runTcpdump(t *testing.T, tcpdump, file, filter string) ([]rawPkt, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, tcpdump, "-r", file, "-w", "-", filter)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if i := strings.LastIndex(msg, "tcpdump: "); i >= 0 {
			msg = msg[i+len("tcpdump: "):]
		}
		return nil, errors.New(msg)
	}
	r, err := pcapfile.NewReader(&stdout, nil)
	if err != nil {
		t.Fatalf("tcpdump's output: %v", err)
	}
	var ps []rawPkt
	for {
		var p pcapfile.Packet
		err := r.ReadInto(&p)
		if err == io.EOF {
			return ps, nil
		}
		if err != nil {
			t.Fatalf("tcpdump's output: %v", err)
		}
		ps = append(ps, rawPkt{bytes.Clone(p.Data), p.OrigLen})
	}
}

// writePcap writes pkts as a pcap file of linkType in the byte order.
func writePcap(t *testing.T, path string, linkType uint16, bigEndian bool, pkts []rawPkt) {
	t.Helper()
	var o binary.AppendByteOrder = binary.LittleEndian
	if bigEndian {
		o = binary.BigEndian
	}
	b := o.AppendUint32(nil, 0xa1b2c3d4)
	b = o.AppendUint16(b, 2)
	b = o.AppendUint16(b, 4)
	b = append(b, make([]byte, 8)...)
	b = o.AppendUint32(b, 65535)
	b = o.AppendUint32(b, uint32(linkType))
	for i, p := range pkts {
		b = o.AppendUint32(b, uint32(base/1e9)+uint32(i))
		b = o.AppendUint32(b, 0)
		b = o.AppendUint32(b, uint32(len(p.data)))
		b = o.AppendUint32(b, p.orig)
		b = append(b, p.data...)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// writeLinkAgent writes pkts, one a second, through a real store below
// dir as agent's interface "if0" of linkType.
func writeLinkAgent(t *testing.T, dir, agent string, linkType uint16, pkts []rawPkt) {
	t.Helper()
	st, err := store.Open(store.Config{Dir: dir, Fsync: store.FsyncNever})
	if err != nil {
		t.Fatal(err)
	}
	w, err := st.Writer(agent)
	if err != nil {
		t.Fatal(err)
	}
	w.Start("h1")
	i, err := w.AddInterface(wire.Interface{Name: "if0", LinkType: linkType, SnapLen: 65535})
	if err != nil {
		t.Fatal(err)
	}
	var e wire.BatchEncoder
	e.Reset(nil)
	for n, p := range pkts {
		e.Append(base/1e9*1e9+int64(n)*1e9, 0, p.orig, p.data)
	}
	b, err := wire.ParseBatch(0, e.Finish(1)[wire.HeaderSize:], wire.BatchLimits{Unchecked: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteBatch(&b, []int{i}, st.Instance([16]byte{1}, agent)); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st.Close(ctx)
}
