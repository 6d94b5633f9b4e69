//go:build linux

package e2e

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
)

// TestUDPReplay replays a file over --transport udp to a collector that
// serves TCP and UDP on the same port number: the agent's goodbye
// closes the file, the collector counts no loss, and the file holds
// every packet exactly once, byte for byte, as pcapfile, tshark and
// capinfos read it. (--max-rate paces the replay: UDP has no flow
// control, and a replay at full speed can outrun a race-enabled
// collector's receive buffer on a busy machine.)
func TestUDPReplay(t *testing.T) {
	requireTools(t, checkTools...)
	ctx := testContext(t)
	const count, stream = 20000, 41
	in, dir := filepath.Join(t.TempDir(), "in.pcap"), t.TempDir()
	writeGenFile(t, in, gen.FileConfig{Count: count, Mix: gen.MixIMIX, Stream: stream, Seed: stream})
	addr := freeport.Addr(t)
	coll := startCollector(t, ctx, "", addr, dir, "--listen-udp", addr)
	agent := startReplay(t, ctx, addr, "udp-a", in, "--transport", "udp", "--max-rate", "40000")
	if code := agent.wait(30 * time.Second); code != 0 {
		t.Fatalf("agent exited with code %d, want 0", code)
	}
	if s := agent.summary(); s.Read != count || s.Sent != count || s.Dropped != 0 || s.Unacked != 0 {
		t.Errorf("agent summary %+v: want %d read and sent, nothing dropped or left", s, count)
	}
	waitNoPart(t, dir, 5*time.Second) // the goodbye closed the file
	coll.stop(20 * time.Second)
	cs := coll.collectorSummary()
	if cs.Sessions != 1 || cs.Packets != count || cs.ProtocolErrors != 0 || cs.Duplicates != 0 {
		t.Errorf("collector summary %+v: want 1 session and %d packets", cs, count)
	}
	if u := cs.udpAgent(t, "udp-a"); u.Received == 0 || u.Lost != 0 || u.Reordered != 0 || u.Duplicates != 0 || u.Late != 0 || u.Malformed != 0 {
		t.Errorf("collector's UDP counts %s: want datagrams and no loss, reordering, duplicate, late or malformed one", u)
	}
	r := checkAgentDir(t, filepath.Join(dir, "udp-a"))
	r.expectExactlyOnce(t, "udp-a", map[uint32]uint64{stream: count})
}
