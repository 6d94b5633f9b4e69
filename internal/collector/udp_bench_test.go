package collector

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/raceflag"

	"github.com/pcapsync/pcapsync/internal/wire"
)

// udpBench is a UDPServer with one session, fed directly (no socket
// reads), and datagrams of one batch each that fill a 1472-byte payload
// with packets of one size.
type udpBench struct {
	u     *UDPServer
	src   netip.AddrPort
	grams [][]byte // seq 1..len
	bytes int      // packet bytes per datagram
}

func newUDPBench(tb testing.TB, size, n int) *udpBench {
	tb.Helper()
	core := newCore(tb, Config{Insecure: true})
	tb.Cleanup(func() { core.Close() })
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	ub := &udpBench{u: NewUDPServer(core), src: netip.MustParseAddrPort("127.0.0.1:1000")}
	ub.u.conn = conn
	ub.u.datagram(wire.AppendHello(nil, hello("bench", 1)), ub.src, time.Now())
	pkt := bytes.Repeat([]byte{0xA5}, size)
	for seq := range n {
		var e wire.BatchEncoder
		e.Reset(nil)
		k := 0
		for e.Len()+size+wire.RecordMaxOverhead <= 1472 || k == 0 {
			e.Append(int64(1_700_000_000_000_000_000+seq*1000+k), 0, uint32(size), pkt)
			k++
		}
		ub.grams = append(ub.grams, e.Finish(uint64(seq+1)))
		ub.bytes = k * size
	}
	return ub
}

// TestUDPDatagramSteadyStateAllocs: a batch datagram of a known
// session (checked, classified by the window, written) and the commits
// allocate nothing.
func TestUDPDatagramSteadyStateAllocs(t *testing.T) {
	if raceflag.Enabled {
		t.Skip("allocation counts mean nothing under the race detector (scripts/test.sh runs this test without it)")
	}
	ub := newUDPBench(t, 64, 2000)
	now := time.Now()
	next := 0
	allocs := testing.AllocsPerRun(1000, func() {
		ub.u.datagram(ub.grams[next], ub.src, now)
		if next++; next%16 == 0 {
			ub.u.commit()
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per datagram, want 0", allocs)
	}
	if got := ub.u.AgentCounts()["bench"]; got.Received != uint64(next) || got.Lost != 0 {
		t.Errorf("counts %+v after %d datagrams", got, next)
	}
}

// BenchmarkUDPDatagram: what the collector's UDP reader spends per
// datagram of one batch (check, window, write to the file's buffer; a
// commit every 16), by packet size.
func BenchmarkUDPDatagram(b *testing.B) {
	for _, size := range []int{64, 576, 1400} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			ub := newUDPBench(b, size, b.N)
			now := time.Now()
			b.ReportAllocs()
			b.SetBytes(int64(ub.bytes))
			b.ResetTimer()
			for i := range b.N {
				ub.u.datagram(ub.grams[i], ub.src, now)
				if i%16 == 15 {
					ub.u.commit()
				}
			}
			ub.u.commit()
		})
	}
}
