//go:build linux

package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
)

// key identifies one generated packet.
type key struct {
	stream uint32
	seq    uint64
}

// dirReport is what an agent's output directory holds.
type dirReport struct {
	Files   []string       // *.pcapng files read, sorted
	Packets int            // packets in all of them
	Counts  map[key]int    // generated packets by (stream, seq)
	Lens    map[key]int    // captured frame length of each generated packet (its last copy)
	Other   int            // packets without a generated payload
	Cut     int            // packets with OrigLen > captured length
	Corrupt []string       // generated packets whose payload bytes are wrong
	IfNames map[string]int // packets per interface name, as tshark reports it
}

// corruptionRE matches what tshark and capinfos say about a bad file.
var corruptionRE = regexp.MustCompile(`(?i)appears to be damaged or corrupt|cut short|isn't a capture file|unknown format|error|invalid`)

// checkAgentDir reads every file of an agent's output directory after
// its collector has stopped. Anything but finished *.pcapng files (a
// leftover .part file, a subdirectory, another file) is a test error.
// Every file must be readable to its end by pcapfile.Reader and by
// tshark and capinfos, without error or corruption warning, and all
// three must agree on its packet count.
func checkAgentDir(t *testing.T, dir string) *dirReport {
	t.Helper()
	r := &dirReport{Counts: map[key]int{}, Lens: map[key]int{}, IfNames: map[string]int{}}
	for _, name := range dirEntries(t, dir) {
		path := filepath.Join(dir, name)
		fi, err := os.Lstat(path)
		switch {
		case err != nil:
			t.Errorf("%s: %v", path, err)
		case strings.HasSuffix(name, ".part"):
			t.Errorf("%s: unfinished file left behind (collector stopped without closing it)", path)
		case !fi.Mode().IsRegular() || !strings.HasSuffix(strings.TrimSuffix(strings.TrimSuffix(name, ".gz"), ".zst"), ".pcapng"):
			t.Errorf("%s: unexpected %v in an agent directory (want only *.pcapng[.gz|.zst] files)", path, fi.Mode().Type())
		default:
			r.Files = append(r.Files, path)
		}
	}
	for _, path := range r.Files {
		n := r.readFile(t, path)
		r.Packets += n
		if got := tsharkCheck(t, path, r.IfNames); got != n {
			t.Errorf("%s: tshark read %d packets, pcapfile.Reader %d", path, got, n)
		}
		if got := capinfosCheck(t, path); got != n {
			t.Errorf("%s: capinfos counts %d packets, pcapfile.Reader %d", path, got, n)
		}
		checkIndex(t, path, n)
	}
	return r
}

// checkIndex checks the index beside a closed capture file of n
// packets, if it has one (a file cut back after a write error, or
// repaired after a crash, has none): it must verify and count the
// file's packets.
func checkIndex(t *testing.T, path string, n int) {
	t.Helper()
	ix, err := index.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		t.Errorf("%s: its index: %v", path, err)
		return
	}
	got := 0
	for _, b := range ix.All {
		got += b.Packets
	}
	if got != n {
		t.Errorf("%s: its index counts %d packets, the file holds %d", path, got, n)
	}
}

// readFile reads one output file with pcapfile.Reader and tallies its
// packets; it returns how many it read.
func (r *dirReport) readFile(t *testing.T, path string) int {
	t.Helper()
	f, err := pcapfile.Open(path)
	if err != nil {
		t.Fatalf("opening output: %v", err)
	}
	defer f.Close()
	rd, err := pcapfile.NewReader(f, nil)
	if err != nil {
		t.Errorf("%s: %v", path, err)
		return 0
	}
	var p pcapfile.Packet
	n := 0
	for {
		if err := rd.ReadInto(&p); err != nil {
			if err != io.EOF {
				t.Errorf("%s: after %d packets: %v", path, n, err)
			}
			return n
		}
		n++
		if p.OrigLen > uint32(len(p.Data)) {
			r.Cut++
		}
		stream, seq, ok, err := gen.Parse(p.Data, rd.Interfaces()[p.Interface].LinkType)
		switch {
		case err != nil:
			r.Corrupt = append(r.Corrupt, fmt.Sprintf("%s packet %d: %v", filepath.Base(path), n, err))
		case !ok:
			r.Other++
		default:
			k := key{stream, seq}
			r.Counts[k]++
			r.Lens[k] = len(p.Data)
		}
	}
}

// tsharkCheck has tshark read path, adds its packets per interface name
// to names and returns the number of packets it printed.
func tsharkCheck(t *testing.T, path string, names map[string]int) int {
	t.Helper()
	out := runTool(t, "tshark", "-r", path, "-T", "fields", "-e", "frame.number", "-e", "frame.interface_name")
	n := 0
	for line := range strings.Lines(out) {
		line = strings.TrimRight(line, "\n")
		num, name, _ := strings.Cut(line, "\t")
		if got, err := strconv.Atoi(num); err != nil || got != n+1 {
			t.Errorf("%s: tshark line %d is %q, want frame number %d", path, n+1, line, n+1)
			return n
		}
		names[name]++
		n++
	}
	return n
}

var capinfosCountRE = regexp.MustCompile(`(?m)^Number of packets:\s*(\d+)\s*$`)

// capinfosCheck has capinfos read path and returns its packet count.
// (-M prints exact numbers instead of "400 k".)
func capinfosCheck(t *testing.T, path string) int {
	t.Helper()
	out := runTool(t, "capinfos", "-M", path)
	m := capinfosCountRE.FindStringSubmatch(out)
	if m == nil {
		t.Errorf("capinfos %s: no packet count in:\n%s", path, out)
		return -1
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// runTool runs a Wireshark tool and returns its stdout. A non-zero exit
// or anything on stderr beyond the warning about running as root is a
// test error.
func runTool(t *testing.T, name string, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var complaints []string
	for line := range strings.Lines(stderr.String()) {
		if strings.HasPrefix(line, "Running as user") || strings.TrimSpace(line) == "" {
			continue
		}
		complaints = append(complaints, strings.TrimSpace(line))
	}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		t.Errorf("%s %s: %v; stderr:\n%s", name, strings.Join(args, " "), err, stderr.String())
	case err != nil:
		t.Fatalf("running %s: %v", name, err)
	case len(complaints) > 0:
		what := "warnings"
		if corruptionRE.MatchString(stderr.String()) {
			what = "corruption warnings"
		}
		t.Errorf("%s %s: exit 0 but %s on stderr:\n%s", name, strings.Join(args, " "), what, strings.Join(complaints, "\n"))
	}
	return stdout.String()
}

// expectExactlyOnce reports, as test errors, how the generated packets
// differ from sequence numbers 0..want[s]-1 of each stream s, each
// present exactly once, byte for byte: lost, duplicated, unexpected
// (another stream, a sequence number out of range, or not generated at
// all) and corrupt packets.
func (r *dirReport) expectExactlyOnce(t *testing.T, what string, want map[uint32]uint64) {
	t.Helper()
	var lost, dup, unexpected []key
	for stream, n := range want {
		for seq := range n {
			switch c := r.Counts[key{stream, seq}]; {
			case c == 0:
				lost = append(lost, key{stream, seq})
			case c > 1:
				dup = append(dup, key{stream, seq})
			}
		}
	}
	extra := 0
	for k, c := range r.Counts {
		if n, ok := want[k.stream]; !ok || k.seq >= n {
			unexpected = append(unexpected, k)
			extra += c
		}
	}
	if len(lost) > 0 {
		t.Errorf("%s: %d packets lost: %s", what, len(lost), keyList(lost))
	}
	if len(dup) > 0 {
		t.Errorf("%s: %d packets duplicated: %s", what, len(dup), keyList(dup))
	}
	if len(unexpected) > 0 {
		t.Errorf("%s: %d unexpected generated packets (%d copies): %s", what, len(unexpected), extra, keyList(unexpected))
	}
	if r.Other > 0 {
		t.Errorf("%s: %d packets without a generated payload", what, r.Other)
	}
	if len(r.Corrupt) > 0 {
		t.Errorf("%s: %d corrupt packets, first: %s", what, len(r.Corrupt), strings.Join(r.Corrupt[:min(len(r.Corrupt), 5)], "; "))
	}
}

// keyList prints up to 10 keys, sorted.
func keyList(ks []key) string {
	slices.SortFunc(ks, func(a, b key) int {
		if a.stream != b.stream {
			return int(a.stream) - int(b.stream)
		}
		return int(a.seq) - int(b.seq)
	})
	var b strings.Builder
	for i, k := range ks {
		if i == 10 {
			fmt.Fprintf(&b, " ... (%d more)", len(ks)-10)
			break
		}
		fmt.Fprintf(&b, " %d/%d", k.stream, k.seq)
	}
	return "stream/seq" + b.String()
}

// readAll reads every packet of a capture file, copies owned by the caller.
func readAll(t *testing.T, path string) ([]pcapfile.Packet, []pcapfile.Interface) {
	t.Helper()
	f, err := pcapfile.Open(path)
	if err != nil {
		t.Fatalf("opening %s: %v", path, err)
	}
	defer f.Close()
	rd, err := pcapfile.NewReader(f, nil)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var pkts []pcapfile.Packet
	for {
		p, err := rd.ReadPacket()
		if err == io.EOF {
			return pkts, rd.Interfaces()
		}
		if err != nil {
			t.Fatalf("%s: after %d packets: %v", path, len(pkts), err)
		}
		pkts = append(pkts, p)
	}
}
