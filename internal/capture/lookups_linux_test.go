//go:build cgo && linux

package capture

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// compileHelperEnv makes the test binary compile the filters on its
// standard input, one a line, as "tcpdump -r" does for an Ethernet
// file, and print libpcap's answer for each on a line: "ok" or the
// error. The tests start it in a network namespace of its own, with no
// interface: a name libpcap looks up fails at once, as "unknown host
// 'NAME'", and no query leaves the machine.
const compileHelperEnv = "CAPTURE_TEST_COMPILE_HELPER"

func compileHelper() int {
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<16), 1<<16)
	for sc.Scan() {
		_, err := CompileFileFilterContext(context.Background(), LinkTypeEthernet, false, sc.Text())
		if err != nil {
			fmt.Println(strings.ReplaceAll(err.Error(), "\n", " "))
		} else {
			fmt.Println("ok")
		}
	}
	return 0
}

// libpcapAnswers compiles exprs with the real libpcap in a network
// namespace without interfaces (unshare -n) and returns its answers.
func libpcapAnswers(t *testing.T, exprs []string) []string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for unshare -n (CI runs as root)")
	}
	cmd := exec.Command("unshare", "-n", os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), compileHelperEnv+"=1")
	cmd.Stdin = strings.NewReader(strings.Join(exprs, "\n") + "\n")
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Logf("stderr: %s", ee.Stderr)
		}
		t.Fatalf("compile helper: %v", err)
	}
	answers := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(answers) != len(exprs) {
		t.Fatalf("%d answers for %d filters", len(answers), len(exprs))
	}
	return answers
}

// lookedUp is the name libpcap's answer says it looked up in the hosts,
// networks or ethers databases, if any.
var lookedUp = regexp.MustCompile(`unknown (?:host|network|ether host)[: ]+'?([^' ]+)'?`)

// TestFilterLookupsAgainstLibpcap: every name libpcap looks up in the
// hosts, networks or ethers databases while compiling a generated
// filter (seen in its error: the names are made not to resolve) is one
// that FilterLookups returns, over thousands of filters mixing names,
// keywords, numbers, addresses, escapes, qualifiers and operators. And
// no keyword of FilterLookups' list is one that this libpcap looks up.
func TestFilterLookupsAgainstLibpcap(t *testing.T) {
	var kws []string
	for k := range filterKeywords {
		kws = append(kws, k)
	}
	slices.Sort(kws)
	rng := rand.New(rand.NewPCG(30, 2026))
	name := func() string {
		parts := []string{"zq", "nohost", "lab", "gw", "r1", "db-1", "x_y", "a.b", "len-5", "hostx", "tcp1", "10.0.0.1x", "1e", "fe", "cafe"}
		n := parts[rng.IntN(len(parts))]
		if rng.IntN(2) == 0 {
			n += fmt.Sprintf("%d.invalid", rng.IntN(1000))
		}
		return n
	}
	value := func() string {
		switch rng.IntN(12) {
		case 0, 1, 2:
			return name()
		case 3:
			return kws[rng.IntN(len(kws))]
		case 4:
			return `\` + []string{"ip", "tcp", "host", "zq.invalid", "lab"}[rng.IntN(5)]
		case 5:
			return fmt.Sprint(rng.IntN(70000))
		case 6:
			return fmt.Sprintf("10.%d.%d.%d", rng.IntN(256), rng.IntN(256), rng.IntN(256))
		case 7:
			return []string{"10.1", "10.1.2", "192.168.0.0/16", "0x1f", "017"}[rng.IntN(5)]
		case 8:
			return []string{"::1", "fe80::1", "2001:db8::/32", "::ffff:10.0.0.1", "fe80::1:2:3"}[rng.IntN(5)]
		case 9:
			return []string{"aa:bb:cc:dd:ee:ff", "aa-bb-cc-dd-ee-ff", "aabb.ccdd.eeff", "aabbccddeeff", "a:b:c:d:e:f"}[rng.IntN(5)]
		case 10:
			return []string{"http", "domain", "ssh", "icmp", "udp", "tcp-syn", "icmp-echo"}[rng.IntN(7)]
		}
		return []string{"zq:lab", "lab:1", "1:lab", "$1f", "-lab", "lab-", "ip[2:2]"}[rng.IntN(7)]
	}
	quals := []string{"", "", "host", "src host", "dst host", "src or dst host", "net", "dst net", "ether host", "ether src",
		"gateway", "port", "src port", "tcp port", "udp dst port", "portrange", "proto", "ip proto", "ether proto", "ip6 proto",
		"protochain", "vlan", "tcp", "ip", "ip6 host", "arp host", "not host", "less", "mask"}
	joins := []string{" and ", " or ", " && ", " || ", " and not ", " "}
	var exprs []string
	for range 3000 {
		var b strings.Builder
		for i := range 1 + rng.IntN(4) {
			if i > 0 {
				b.WriteString(joins[rng.IntN(len(joins))])
			}
			q := quals[rng.IntN(len(quals))]
			v := value()
			if rng.IntN(8) == 0 {
				v = "(" + v + " or " + value() + ")"
			}
			if q != "" {
				b.WriteString(q + " ")
			}
			b.WriteString(v)
		}
		exprs = append(exprs, b.String())
	}
	// The keywords: as a host, and alone.
	for _, k := range kws {
		exprs = append(exprs, "host "+k, k, "tcp and "+k)
	}
	answers := libpcapAnswers(t, exprs)
	seen, flagged, spare := 0, 0, 0
	for i, expr := range exprs {
		got := FilterLookups(expr)
		if len(got) > 0 {
			flagged++
		}
		m := lookedUp.FindStringSubmatch(answers[i])
		if m == nil {
			if len(got) > 0 && answers[i] == "ok" {
				spare++ // returned a word libpcap did not look up (a service name, say)
			}
			continue
		}
		seen++
		if !slices.ContainsFunc(got, func(w string) bool { return strings.TrimPrefix(w, `\`) == m[1] }) {
			t.Errorf("%q: libpcap looked up %q (%s); FilterLookups = %q", expr, m[1], answers[i], got)
		}
	}
	t.Logf("%d filters: libpcap looked a name up in %d, FilterLookups returned names for %d (%d that compiled without a lookup)", len(exprs), seen, flagged, spare)
	if seen < 300 {
		t.Errorf("only %d filters made libpcap look a name up: the corpus does not test much", seen)
	}
}
