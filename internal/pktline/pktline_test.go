package pktline

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
)

// TestPrint: one line per packet with the interface's name (control
// bytes shown as '?'); an empty stream prints nothing and is no error,
// one that is not pcap or pcapng is ErrStream.
func TestPrint(t *testing.T) {
	var src bytes.Buffer
	w, err := pcapfile.NewNgWriter(&src, pcapfile.SectionInfo{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"web1:eth0", "evil\x1b[2J:eth1"} {
		if _, err := w.AddInterface(pcapfile.Interface{Name: name, LinkType: 1}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		frame := gen.Frame(make([]byte, 80), gen.LinkTypeEthernet, 0, uint64(i))
		if err := w.WritePacket(i, 1_795_000_000_123_456_789+int64(i), uint32(len(frame)), frame); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	n, err := Print(&out, &src, time.UTC)
	want := "2026-11-18 11:06:40.123456789 web1:eth0 IP 198.18.0.1.40000 > 198.18.0.2.5555: UDP, length 38\n" +
		"2026-11-18 11:06:40.123456790 evil?[2J:eth1 IP 198.18.0.1.40000 > 198.18.0.2.5555: UDP, length 38\n"
	if n != 2 || err != nil || out.String() != want {
		t.Errorf("Print = %d, %v:\n%s\nwant\n%s", n, err, out.String(), want)
	}
	if n, err := Print(&out, strings.NewReader(""), nil); n != 0 || err != nil {
		t.Errorf("empty: %d, %v", n, err)
	}
	if _, err := Print(&out, strings.NewReader("PCAPSYNC-TAP/1 ERROR no\n"), nil); !errors.Is(err, ErrStream) {
		t.Errorf("not pcapng: %v, want ErrStream", err)
	}
}
