package pcapfile

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestWiresharkReadsNgWriterOutput checks NgWriter output with the real
// Wireshark tools when they are installed.
func TestWiresharkReadsNgWriterOutput(t *testing.T) {
	capinfos, err := exec.LookPath("capinfos")
	if err != nil {
		t.Skip("capinfos not on PATH (install wireshark-common / tshark to run this test)")
	}
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not on PATH (install tshark to run this test)")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "out.pcapng")
	packets := []struct {
		ifIndex int
		size    int
		origLen uint32
	}{
		{0, 60, 60},
		{1, 100, 100},
		{0, 1514, 1514},
		{1, 64, 200},
		{0, 9000, 9000},
		{0, 0, 0},
	}
	writeFile(t, file, func(w *NgWriter) {
		for _, ifc := range []Interface{
			{Name: "eth0", Description: "first", LinkType: 1, SnapLen: 65535},
			{Name: "tun9", LinkType: 101, SnapLen: 262144},
		} {
			if _, err := w.AddInterface(ifc); err != nil {
				t.Fatal(err)
			}
		}
		ts := int64(1_700_000_000_123_456_789)
		for i, p := range packets {
			if err := w.WritePacket(p.ifIndex, ts+int64(i)*1000, p.origLen, payload(p.size, byte(i))); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 2 {
			st := InterfaceStats{Timestamp: ts + 1e9, IfRecv: 10, IfDrop: 1, HaveIfRecv: true, HaveIfDrop: true, Comment: "end"}
			if err := w.WriteStats(i, st); err != nil {
				t.Fatal(err)
			}
		}
	})

	env := append(os.Environ(), "HOME="+dir) // keep tshark's profile out of the real home
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Env = env
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
		}
		return string(out)
	}

	info := run(capinfos, file)
	for _, want := range []string{"pcapng", "Number of packets:", "Number of interfaces in file: 2"} {
		if !strings.Contains(info, want) {
			t.Errorf("capinfos output lacks %q:\n%s", want, info)
		}
	}
	if f := strings.Fields(lineWith(info, "Number of packets:")); len(f) < 4 || f[3] != "6" {
		t.Errorf("capinfos packet count line %q, want 6 packets", lineWith(info, "Number of packets:"))
	}

	out := run(tshark, "-r", file, "-T", "fields", "-e", "frame.interface_name", "-e", "frame.len", "-e", "frame.cap_len")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(packets) {
		t.Fatalf("tshark printed %d lines, want %d:\n%s", len(lines), len(packets), out)
	}
	names := []string{"eth0", "tun9"}
	for i, p := range packets {
		want := strings.Join([]string{names[p.ifIndex], strconv.Itoa(int(p.origLen)), strconv.Itoa(p.size)}, "\t")
		if lines[i] != want {
			t.Errorf("tshark line %d = %q, want %q", i, lines[i], want)
		}
	}
}

func writeFile(t *testing.T, name string, fill func(w *NgWriter)) {
	t.Helper()
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	bw := bufio.NewWriter(f)
	w, err := NewNgWriter(bw, SectionInfo{OS: "Linux", UserAppl: "pcapfile test", Comment: "written by TestWiresharkReadsNgWriterOutput"})
	if err != nil {
		t.Fatal(err)
	}
	fill(w)
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func lineWith(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// TestWiresharkAcceptsMaxCapLen checks MaxCapLen against capinfos: a
// packet of MaxCapLen bytes reads, one byte more does not.
func TestWiresharkAcceptsMaxCapLen(t *testing.T) {
	capinfos, err := exec.LookPath("capinfos")
	if err != nil {
		t.Skip("capinfos not on PATH (install wireshark-common / tshark to run this test)")
	}
	for _, tc := range []struct {
		name     string
		linkType uint16
		size     int
		ok       bool
	}{
		{"ethernet at the limit", 1, MaxCapLenStandard, true},
		{"ethernet over it", 1, MaxCapLenStandard + 1, false},
		{"raw ip over it", 101, MaxCapLenStandard + 1, false},
		{"dbus over the standard limit", LinkTypeDBus, 300000, true},
		{"usbpcap over the standard limit", LinkTypeUSBPcap, 300000, true},
		{"ebhscr over the standard limit", LinkTypeEBHSCR, 300000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.ok && tc.size <= int(MaxCapLen(uint32(tc.linkType))) || tc.ok && tc.size > int(MaxCapLen(uint32(tc.linkType))) {
				t.Fatalf("case disagrees with MaxCapLen(%d) = %d", tc.linkType, MaxCapLen(uint32(tc.linkType)))
			}
			file := filepath.Join(t.TempDir(), "out.pcapng")
			writeFile(t, file, func(w *NgWriter) {
				if _, err := w.AddInterface(Interface{Name: "if", LinkType: tc.linkType, SnapLen: MaxCapLen(uint32(tc.linkType))}); err != nil {
					t.Fatal(err)
				}
				if err := w.WritePacket(0, 1_700_000_000_000_000_000, uint32(tc.size), payload(tc.size, 1)); err != nil {
					t.Fatal(err)
				}
			})
			cmd := exec.Command(capinfos, "-c", file)
			cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
			out, err := cmd.CombinedOutput()
			if tc.ok && err != nil {
				t.Errorf("capinfos fails on %d bytes of link type %d: %v\n%s", tc.size, tc.linkType, err, out)
			}
			if !tc.ok && err == nil {
				t.Errorf("capinfos reads %d bytes of link type %d, over MaxCapLen:\n%s", tc.size, tc.linkType, out)
			}
		})
	}
}
