package pktline

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen/capgen"
)

var (
	lineStart = regexp.MustCompile(`^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{9} `)
	ipPair    = regexp.MustCompile(`\b(IP6?) (\S+) > (\S+):`)
	portPair  = regexp.MustCompile(`^ (?:(?:HBH|DSTOPT|RT6 \([^)]*\)|frag \([^)]*\)) )+(?:\S+\.)?(\d+) > (?:\S+\.)?(\d+):`)
	tcpFields = regexp.MustCompile(`Flags \[([^\]]*)\].*?, length (\d+)`)
	udpFields = regexp.MustCompile(`: UDP, length (\d+)`)
	arpFields = regexp.MustCompile(`ARP, (Request who-has \S+(?: \([0-9a-f:]+\))? tell \S+|Reply \S+ is-at \S+),`)
)

// endpoint is an address and its port ("" none) as tcpdump -n writes
// them: a dotted IPv4 address with a fifth number, or an IPv6 address
// with ".PORT".
type endpoint struct{ addr, port string }

func splitEndpoint(s string) endpoint {
	i := strings.LastIndexByte(s, '.')
	if i < 0 || strings.Trim(s[i+1:], "0123456789") != "" {
		return endpoint{addr: s}
	}
	if strings.Contains(s, ":") { // IPv6: a port unless an embedded IPv4 address ends it
		if !strings.Contains(s[:i], ".") {
			return endpoint{s[:i], s[i+1:]}
		}
		return endpoint{addr: s}
	}
	if strings.Count(s, ".") == 4 {
		return endpoint{s[:i], s[i+1:]}
	}
	return endpoint{addr: s}
}

// pair returns the IP version word, the endpoints and whether line has
// them; for a line whose first pair has no ports, a later pair of the
// same addresses with ports (tcpdump writes IPv6 extension headers
// between them).
func pair(line string) (ver string, src, dst endpoint, ok bool) {
	m := ipPair.FindStringSubmatchIndex(line)
	if m == nil {
		return "", src, dst, false
	}
	ver, src, dst = line[m[2]:m[3]], splitEndpoint(line[m[4]:m[5]]), splitEndpoint(line[m[6]:m[7]])
	if src.port == "" && ver == "IP6" {
		// After extension headers tcpdump writes the ports alone.
		if p := portPair.FindStringSubmatch(line[m[1]:]); p != nil {
			src.port, dst.port = p[1], p[2]
		}
	}
	return ver, src, dst, true
}

// TestTcpdump compares the fields a line prints with tcpdump -n's line
// of the same packet, over generated captures of every link type
// capgen writes: the time (tcpdump -tttt, nanoseconds, UTC), IP or IP6
// with the addresses and ports, TCP's flags and payload length, UDP's
// payload length, ARP's request or reply. Lines where tcpdump prints
// more are compared on what both print; the test fails if too few
// packets were compared to mean anything.
func TestTcpdump(t *testing.T) {
	tcpdump, err := exec.LookPath("tcpdump")
	if err != nil {
		t.Skip("tcpdump not installed: it is the reference")
	}
	dir := t.TempDir()
	var total, compared int
	for i, link := range capgen.Links {
		for seed := uint64(1); seed <= 2; seed++ {
			c := capgen.Generate(capgen.Config{Seed: seed, Index: i, Link: link, Packets: 400, Start: 1_795_000_000_000_000_000})
			path := filepath.Join(dir, c.Name+".pcap")
			if err := c.WriteFile(path); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(tcpdump, "-n", "-tttt", "--time-stamp-precision=nano", "-r", path)
			cmd.Env = append(os.Environ(), "TZ=UTC")
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%s: tcpdump: %v", c.Name, err)
			}
			theirs := packets(string(out))
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			n, err := Print(&b, f, time.UTC)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			ours := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
			if int(n) != len(c.Packets) || len(ours) != len(theirs) {
				t.Fatalf("%s: %d lines of ours (%d packets), %d of tcpdump's, %d packets", c.Name, len(ours), n, len(theirs), len(c.Packets))
			}
			for k := range ours {
				total++
				if compareLine(t, c.Name, ours[k], theirs[k]) {
					compared++
				}
			}
		}
	}
	t.Logf("%d packets, %d with addresses compared", total, compared)
	if compared < total/3 {
		t.Errorf("only %d of %d packets had addresses to compare", compared, total)
	}
}

// packets splits tcpdump's output into one string per packet.
func packets(out string) []string {
	var ps []string
	for l := range strings.SplitSeq(strings.TrimSuffix(out, "\n"), "\n") {
		if lineStart.MatchString(l) || len(ps) == 0 {
			ps = append(ps, l)
			continue
		}
		ps[len(ps)-1] += " " + strings.TrimSpace(l)
	}
	return ps
}

// compareLine reports an error for each field of ours that tcpdump's
// line shows otherwise; true if it had addresses to compare.
func compareLine(t *testing.T, name, ours, theirs string) bool {
	t.Helper()
	const tl = len(TimeLayout)
	if len(theirs) < tl || ours[:tl] != theirs[:tl] {
		t.Errorf("%s: time differs:\nours    %s\ntcpdump %s", name, ours, theirs)
		return false
	}
	rest := ours[tl+1:]
	rest = rest[strings.IndexByte(rest, ' ')+1:] // the interface
	tver, tsrc, tdst, tok := pair(theirs[tl:])
	over, osrc, odst, ook := pair(rest)
	if ook && !strings.HasPrefix(rest, over+" ") {
		ook = false // our line names the addresses first, or not at all
	}
	switch {
	case tok && !ook:
		t.Errorf("%s: tcpdump shows addresses, we do not:\nours    %s\ntcpdump %s", name, ours, theirs)
		return false
	case !tok && ook:
		t.Errorf("%s: we show addresses, tcpdump does not:\nours    %s\ntcpdump %s", name, ours, theirs)
		return false
	case !tok:
		if m := arpFields.FindStringSubmatch(theirs); m != nil && !strings.Contains(rest, m[1]) {
			t.Errorf("%s: ARP differs:\nours    %s\ntcpdump %s", name, ours, theirs)
		}
		return false
	}
	if tver != over || tsrc != osrc || tdst != odst {
		t.Errorf("%s: addresses differ:\nours    %s\ntcpdump %s", name, ours, theirs)
		return true
	}
	if m := tcpFields.FindStringSubmatch(theirs); m != nil && strings.Contains(rest, "Flags [") {
		if o := tcpFields.FindStringSubmatch(rest); o == nil || o[1] != m[1] || o[2] != m[2] {
			t.Errorf("%s: TCP differs:\nours    %s\ntcpdump %s", name, ours, theirs)
		}
	}
	if m := udpFields.FindStringSubmatch(theirs); m != nil && strings.Contains(rest, ": UDP") {
		if o := udpFields.FindStringSubmatch(rest); o == nil || o[1] != m[1] {
			t.Errorf("%s: UDP differs:\nours    %s\ntcpdump %s", name, ours, theirs)
		}
	}
	return true
}
