//go:build cgo

package capture

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/net/bpf"
)

// TestCompileFileFilterAsTcpdump: CompileFileFilterContext gives the
// program tcpdump -dd -r gives for a pcap file of the link type and
// byte order, and refuses what tcpdump refuses, with its message.
func TestCompileFileFilterAsTcpdump(t *testing.T) {
	tcpdump, err := exec.LookPath("tcpdump")
	if err != nil {
		t.Skip("tcpdump not installed: the reference this test compares with (apt-get install tcpdump)")
	}
	native := binary.NativeEndian.Uint16([]byte{0, 1}) == 1 // big-endian host
	for _, c := range []struct {
		linkType  uint16
		bigEndian bool
		filters   []string
	}{
		{1, false, []string{"ip broadcast", "ip6 protochain 17", "less 100", "port 053", "inbound", "ifindex 3", "wlan type data"}},
		{0, false, []string{"ip", "ip6", "host 10.0.0.1"}},
		{0, true, []string{"ip", "ip6", "host 10.0.0.1"}},
		{108, false, []string{"ip", "ip6"}},
		{101, false, []string{"ip", "ip6", "udp port 53"}},
		{113, false, []string{"inbound", "outbound", "ifindex 3"}},
		{276, false, []string{"inbound", "ifindex 3"}},
		{105, false, []string{"wlan type data", "ip"}},
	} {
		file := filepath.Join(t.TempDir(), "h.pcap")
		var o binary.AppendByteOrder = binary.LittleEndian
		if c.bigEndian {
			o = binary.BigEndian
		}
		h := o.AppendUint32(nil, 0xa1b2c3d4)
		h = o.AppendUint16(o.AppendUint16(h, 2), 4)
		h = append(h, make([]byte, 8)...)
		h = o.AppendUint32(o.AppendUint32(h, MaxSnapLen), uint32(c.linkType))
		if err := os.WriteFile(file, h, 0o600); err != nil {
			t.Fatal(err)
		}
		for _, f := range c.filters {
			var stdout, stderr bytes.Buffer
			cmd := exec.Command(tcpdump, "-dd", "-r", file, f)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			terr := cmd.Run()
			prog, err := CompileFileFilterContext(context.Background(), c.linkType, c.bigEndian != native, f)
			name := fmt.Sprintf("link type %d big-endian %v %q", c.linkType, c.bigEndian, f)
			if terr != nil {
				msg := strings.TrimSpace(stderr.String())
				msg = msg[strings.LastIndex(msg, "tcpdump: ")+len("tcpdump: "):]
				if !errors.Is(err, ErrBadFilter) || !strings.HasSuffix(err.Error(), ": "+msg) {
					t.Errorf("%s: %v, want ErrBadFilter with tcpdump's %q", name, err, msg)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s: %v; tcpdump compiles it", name, err)
				continue
			}
			var want []bpf.RawInstruction
			for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
				var in bpf.RawInstruction
				if _, err := fmt.Sscanf(line, "{ %v, %d, %d, %v },", &in.Op, &in.Jt, &in.Jf, &in.K); err != nil {
					t.Fatalf("tcpdump -dd line %q: %v", line, err)
				}
				want = append(want, in)
			}
			if fmt.Sprint(prog) != fmt.Sprint(want) {
				t.Errorf("%s: %v, tcpdump -dd -r %v", name, prog, want)
			}
		}
	}
}
