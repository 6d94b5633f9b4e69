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

// FuzzAppendLine: any bytes of any link type, with any original length,
// make one line (no newline, printable ASCII only: the bytes come from
// files) that starts with the time and the interface, and never a
// panic.
func FuzzAppendLine(f *testing.F) {
	frame := gen.Frame(make([]byte, 80), gen.LinkTypeEthernet, 0, 1)
	for _, lt := range []uint16{0, 1, 12, 101, 105, 108, 113, 127, 228, 229, 276} {
		f.Add(lt, uint32(80), frame)
		f.Add(lt, uint32(1500), frame[:20])
		f.Add(lt, uint32(0), []byte{})
	}
	f.Add(uint16(1), uint32(62), append([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x86, 0xdd, 0x60, 0, 0, 0, 0, 8, 0, 64}, make([]byte, 40)...))
	f.Fuzz(func(t *testing.T, lt uint16, orig uint32, data []byte) {
		line := string(AppendLine(nil, &Packet{Timestamp: 1, Iface: "a:b", LinkType: lt, OrigLen: orig, Data: data}, time.UTC))
		if !strings.HasPrefix(line, "1970-01-01 00:00:00.000000001 a:b ") {
			t.Fatalf("line %q", line)
		}
		for i := range len(line) {
			if line[i] < 0x20 || line[i] > 0x7e {
				t.Fatalf("byte %#x in line %q", line[i], line)
			}
		}
	})
}
