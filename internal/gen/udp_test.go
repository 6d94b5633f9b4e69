package gen

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"
)

func TestUDPSizes(t *testing.T) {
	for _, tc := range []struct {
		mix  Mix
		want map[int]int // frame size -> count in one cycle
	}{
		{Mix64, map[int]int{64: 12}},
		{MixIMIX, map[int]int{64: 7, 576: 4, 1500: 1}},
	} {
		sizes, err := tc.mix.UDPSizes()
		if err != nil {
			t.Fatal(err)
		}
		got := map[int]int{}
		for _, s := range sizes {
			got[s+14+20+8]++
		}
		if len(got) != len(tc.want) {
			t.Errorf("%s: frame sizes %v, want %v", tc.mix, got, tc.want)
		}
		for size, n := range tc.want {
			if got[size] != n {
				t.Errorf("%s: %d frames of %d bytes per cycle, want %d", tc.mix, got[size], size, n)
			}
		}
	}
	if _, err := MixMixed.UDPSizes(); err == nil {
		t.Error("mixed: no error")
	}
}

// TestSendUDPDuration: with no count, the send stops after its duration.
func TestSendUDPDuration(t *testing.T) {
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	start := time.Now()
	n, err := SendUDP(context.Background(), UDPConfig{To: pc.LocalAddr().(*net.UDPAddr).AddrPort(), Duration: 100 * time.Millisecond, Rate: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 100*time.Millisecond || el > 2*time.Second || n < 50 || n > 150 {
		t.Errorf("sent %d in %v, want about 100 in 100ms", n, el)
	}
	if _, err := SendUDP(context.Background(), UDPConfig{To: netip.MustParseAddrPort("127.0.0.1:9")}); err == nil {
		t.Error("no count and no duration: no error")
	}
}
