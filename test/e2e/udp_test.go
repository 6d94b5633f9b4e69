package e2e

import (
	"fmt"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
)

var udpAgentRE = regexp.MustCompile(`pcapsync collector: udp agent (\S+): datagrams (\d+), lost (\d+), reordered (\d+), duplicates (\d+), late (\d+), malformed (\d+)`)

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
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
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
	if cs := coll.collectorSummary(); cs.Sessions != 1 || cs.Packets != count || cs.ProtocolErrors != 0 || cs.Duplicates != 0 {
		t.Errorf("collector summary %+v: want 1 session and %d packets", cs, count)
	}
	m := udpAgentRE.FindStringSubmatch(coll.stdout.String())
	if m == nil || m[1] != "udp-a" || m[2] == "0" || m[3] != "0" || m[4] != "0" || m[5] != "0" || m[6] != "0" || m[7] != "0" {
		t.Errorf("collector's UDP line %q: want datagrams and no loss, reordering, duplicate, late or malformed one", m)
	}
	r := checkAgentDir(t, filepath.Join(dir, "udp-a"))
	r.expectExactlyOnce(t, "udp-a", map[uint32]uint64{stream: count})
}
