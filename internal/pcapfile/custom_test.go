package pcapfile

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPacketCustomOption: a custom option on a packet is skipped by this
// package's reader and, when installed, by tshark and capinfos, which
// still count exactly the packets written.
func TestPacketCustomOption(t *testing.T) {
	var buf bytes.Buffer
	w := ethWriter(t, &buf, "e", 100)
	for i := range 3 {
		data := bytes.Repeat([]byte{byte(i)}, 61+i)
		if err := w.WritePacketCustom(0, int64(i), 70, data, 32473, bytes.Repeat([]byte{9}, 25+i)); err != nil {
			t.Fatal(err)
		}
		w.WritePacket(0, int64(i), 60, make([]byte, 60))
	}
	r, err := NewReader(bytes.NewReader(buf.Bytes()), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		var p Packet
		if err := r.ReadInto(&p); err == io.EOF {
			if i != 6 {
				t.Fatalf("read %d packets, want 6", i)
			}
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 && (len(p.Data) != 61+i/2 || p.Data[0] != byte(i/2) || p.OrigLen != 70) {
			t.Fatalf("packet %d with option read back wrong: len %d orig %d", i, len(p.Data), p.OrigLen)
		}
	}
	value := make([]byte, 28)
	if a := testing.AllocsPerRun(100, func() { w.WritePacketCustom(0, 1, 60, value, 32473, value) }); a != 0 {
		t.Errorf("WritePacketCustom: %v allocs, want 0", a)
	}
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Skip("tshark not installed; skipping its check")
	}
	path := filepath.Join(t.TempDir(), "c.pcapng")
	var out bytes.Buffer
	w2, _ := NewNgWriter(&out, SectionInfo{})
	w2.AddInterface(Interface{Name: "e", LinkType: 1, SnapLen: 100})
	for i := range 3 {
		w2.WritePacketCustom(0, int64(i), 60, make([]byte, 60), 32473, value)
	}
	os.WriteFile(path, out.Bytes(), 0o600)
	got, err := exec.Command("tshark", "-r", path, "-T", "fields", "-e", "frame.number").Output()
	if err != nil || strings.Count(string(got), "\n") != 3 {
		t.Fatalf("tshark: %v, frames:\n%s", err, got)
	}
	if ci, err := exec.Command("capinfos", "-c", "-M", path).CombinedOutput(); err != nil || !strings.Contains(string(ci), "3") {
		t.Fatalf("capinfos: %v\n%s", err, ci)
	}
}
