package sockopt

import (
	"net"
	"os"
	"runtime"
	"testing"
)

func TestSetBuffers(t *testing.T) {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const want = 4 << 20
	rcv, snd, err := SetBuffers(c, want, want)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("receive buffer %d, send buffer %d", rcv, snd)
	// Only root may exceed net.core.rmem_max; Linux reports double.
	if runtime.GOOS == "linux" && os.Geteuid() == 0 && (rcv < want || snd < want) {
		t.Fatalf("as root: buffers %d/%d, want at least %d", rcv, snd, want)
	}
}
