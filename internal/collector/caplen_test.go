package collector

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/testutil/capturetest"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// TestOversizePacketsCutToLinkTypeLimit: an agent that sends packets
// longer than readers accept for their link type (an old or a bogus
// one) must not make the file unreadable: the collector cuts them to
// pcapfile.MaxCapLen, keeps their original length and counts them; a
// D-Bus packet of the same length is within its link type's limit and
// kept whole.
func TestOversizePacketsCutToLinkTypeLimit(t *testing.T) {
	c := newCore(t, Config{})
	h := &wire.Hello{Instance: [16]byte{7}, Name: "big", Host: "h1", Interfaces: []wire.Interface{
		{Name: "eth0", LinkType: 1, SnapLen: 262144}, {Name: "bus", LinkType: pcapfile.LinkTypeDBus, SnapLen: 1 << 20}}}
	s, _, err := c.begin(h, Peer{}, func() {})
	if err != nil {
		t.Fatal(err)
	}
	const big = 300000
	type pkt struct {
		iface uint32
		size  int
	}
	// The last packet of a batch goes through the mark-writing path.
	sent := []pkt{{0, big}, {1, big}, {0, 100}, {0, big}}
	var e wire.BatchEncoder
	e.Reset(nil)
	for i, p := range sent {
		e.Append(int64(1_700_000_000_000_000_000+i), p.iface, uint32(p.size), bytes.Repeat([]byte{byte(i + 1)}, p.size))
	}
	if _, err := s.batch(0, e.Finish(1)[wire.HeaderSize:]); err != nil {
		t.Fatal(err)
	}
	if seq, err := s.commit(); seq != 1 || err != nil {
		t.Fatalf("Commit = %d, %v", seq, err)
	}
	s.end(true)
	dir := filepath.Join(c.Dir(), "big")
	pkts, _ := readDir(t, dir)
	if len(pkts) != len(sent) {
		t.Fatalf("%d packets written, want %d", len(pkts), len(sent))
	}
	for i, p := range pkts {
		want := sent[i].size
		if sent[i].iface == 0 {
			want = min(want, pcapfile.MaxCapLenStandard)
		}
		if len(p.Data) != want || p.OrigLen != uint32(sent[i].size) || p.Data[0] != byte(i+1) {
			t.Errorf("packet %d: %d bytes of original %d (first byte %d), want %d of %d", i, len(p.Data), p.OrigLen, p.Data[0], want, sent[i].size)
		}
	}
	if got := c.Store().Counters.Truncated.Load(); got != 2 {
		t.Errorf("Truncated = %d, want 2", got)
	}
	capinfos, err := exec.LookPath("capinfos")
	if err != nil {
		t.Skip("capinfos not on PATH: the file was not checked with Wireshark's reader")
	}
	ents, _ := os.ReadDir(dir)
	for _, ent := range ents {
		if capturetest.IsIndex(ent.Name()) {
			continue
		}
		cmd := exec.Command(capinfos, "-c", filepath.Join(dir, ent.Name()))
		cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("capinfos %s: %v\n%s", ent.Name(), err, out)
		}
	}
}
