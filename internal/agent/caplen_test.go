package agent

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pcapsync/pcapsync/internal/collector"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
)

// TestReplayCutsToLinkTypeLimit replays a file holding a packet of
// 300 000 bytes, longer than pcapng readers accept for Ethernet (262144)
// but not for D-Bus (128 MiB): the Ethernet one arrives cut to 262144
// bytes with its original length, the D-Bus one whole; the agent counts
// the cut, the collector has nothing left to cut, and capinfos reads the
// file.
func TestReplayCutsToLinkTypeLimit(t *testing.T) {
	const big = 300000
	for _, tc := range []struct {
		name     string
		linkType uint16
		wantCap  int
		wantCut  uint64
	}{
		{"ethernet", 1, pcapfile.MaxCapLenStandard, 1},
		{"dbus", pcapfile.LinkTypeDBus, big, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "in.pcap")
			sizes := []int{100, big, 60}
			writePcap(t, path, tc.linkType, sizes)
			rc := startCollector(t, collector.Config{Insecure: true})
			a, err := New(Config{Collectors: []string{rc.addr}, Name: "big", ReadFile: path, Insecure: true, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			sum, err := a.Run(context.Background())
			if err != nil || sum.Acked != 3 {
				t.Fatalf("Run: %+v, %v", sum, err)
			}
			if sum.LinkTruncated != tc.wantCut || a.Stats().LinkTruncated != tc.wantCut {
				t.Errorf("LinkTruncated = %d, want %d", sum.LinkTruncated, tc.wantCut)
			}
			if tc.wantCut > 0 && !strings.Contains(sum.String(), "truncated to the link type's limit 1") {
				t.Errorf("summary %q does not mention the cut", sum)
			}
			if n := rc.core.Store().Counters.Truncated.Load(); n != 0 {
				t.Errorf("collector cut %d packets, want 0: the agent cuts them", n)
			}
			files := rc.files(t)
			if len(files) != 2 { // the agent's directory and one file
				t.Fatalf("collector wrote %v", files)
			}
			file := filepath.Join(rc.dir, files[1])
			got := readPackets(t, file)
			if len(got) != len(sizes) {
				t.Fatalf("%d packets in the file, want %d", len(got), len(sizes))
			}
			for i, p := range got {
				want := min(sizes[i], tc.wantCap)
				if len(p.Data) != want || p.OrigLen != uint32(sizes[i]) {
					t.Errorf("packet %d: %d bytes of original %d, want %d of %d", i, len(p.Data), p.OrigLen, want, sizes[i])
				}
			}
			capinfos, err := exec.LookPath("capinfos")
			if err != nil {
				t.Skip("capinfos not on PATH: the file was not checked with Wireshark's reader")
			}
			cmd := exec.Command(capinfos, "-c", "-l", file)
			cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("capinfos: %v\n%s", err, out)
			}
			t.Logf("capinfos:\n%s", out)
		})
	}
}

// writePcap writes a classic pcap file of one packet per size.
func writePcap(t *testing.T, path string, linkType uint16, sizes []int) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bw := bufio.NewWriter(f)
	w, err := pcapfile.NewPcapWriter(bw, linkType, 1<<20, true)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range sizes {
		if err := w.WritePacket(1_700_000_000_000_000_000+int64(i)*1000, uint32(n), bytes.Repeat([]byte{byte(i + 1)}, n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
}
