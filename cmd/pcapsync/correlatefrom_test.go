package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pcapsync/pcapsync/internal/correlate"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
)

// TestCorrelateFrom: correlate --from four servers (agent a on one, b
// on another, s on two, none on the fourth) reports what correlate --dir reports over a
// copy of the three roots, and writes the same unmatched packets; a
// server down or stalling fails it, naming the server.
func TestCorrelateFrom(t *testing.T) {
	roots, merged := flowRoots3(t)
	var addrs []string
	for _, r := range append(roots[:], t.TempDir()) { // and a server holding none of the agents
		addrs = append(addrs, startQueryServer(t, r, "127.0.0.1:0", nil))
	}
	correlateJSON := func(args ...string) (correlate.Report, []string) {
		t.Helper()
		w := filepath.Join(t.TempDir(), "u.pcapng")
		var so, se bytes.Buffer
		if err := run(context.Background(), append([]string{"correlate", "--json", "--agent", "a,b,s", "-w", w}, args...), &so, &se); err != nil {
			t.Fatalf("correlate %q: %v (%s)", args, err, se.String())
		}
		var rep correlate.Report
		if err := json.Unmarshal(so.Bytes(), &rep); err != nil {
			t.Fatalf("%v: %s", err, so.String())
		}
		return rep, unmatchedPackets(t, w)
	}
	for _, sel := range [][]string{nil, {"tcp"}, {"--since", "2026-11-24T10:00:00.1Z", "udp or icmp"}} {
		local, lu := correlateJSON(append([]string{"--dir", merged}, sel...)...)
		remote, ru := correlateJSON(append([]string{"--insecure", "--from", strings.Join(addrs, ",")}, sel...)...)
		lj, _ := json.Marshal(local)
		rj, _ := json.Marshal(remote)
		if local.Agents[0].Packets == 0 || local.Pairs[0].Matched == 0 || string(lj) != string(rj) {
			t.Errorf("%q: --from:\n%s\n--dir over the copy:\n%s", sel, rj, lj)
		}
		if len(lu) == 0 || strings.Join(lu, "\n") != strings.Join(ru, "\n") {
			t.Errorf("%q: unmatched packets: --from %d, --dir %d", sel, len(ru), len(lu))
		}
	}
	for _, bad := range []struct{ addr, outcome string }{{stoppedServer(t), "unreachable"}, {stallingServer(t), "timed out"}} {
		err := run(context.Background(), []string{"correlate", "--agent", "a,b", "--insecure", "--server-timeout", "300ms",
			"--from", addrs[0] + "," + bad.addr}, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), bad.addr+": "+bad.outcome) {
			t.Errorf("a server %s: %v, want an error naming %s", bad.outcome, err, bad.addr)
		}
	}
}

// unmatchedPackets reads the pcapng p: one line per packet, its
// interface's name, time and bytes, sorted (packets of the same time
// at two agents may come in either order).
func unmatchedPackets(t *testing.T, p string) []string {
	t.Helper()
	var out []string
	eachPacket(t, p, func(ifaces []pcapfile.Interface, pk *pcapfile.Packet) {
		out = append(out, fmt.Sprintf("%s %d %x", ifaces[pk.Interface].Name, pk.Timestamp, pk.Data))
	})
	slices.Sort(out)
	return out
}
