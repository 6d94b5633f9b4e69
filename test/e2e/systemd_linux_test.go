//go:build linux

package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
)

// systemdUnits are the units under deploy/systemd, with the highest
// exposure systemd-analyze security may give each (lower is better; the
// agent needs packet sockets and two capabilities), and the systemd
// release whose scores docs/systemd.md records.
var systemdUnits = []struct {
	file        string
	maxExposure float64
}{
	{"pcapsync-agent.service", 2.5},
	{"pcapsync-agent@.service", 2.5},
	{"pcapsync-collector.service", 2.0},
	{"pcapsync-writer.service", 2.0},
}

const scoredSystemd = 252

// TestSystemdUnits checks deploy/systemd's units with systemd-analyze
// verify (any warning fails: an unknown or misspelt setting is only a
// warning there) and their systemd-analyze security exposure against
// the bounds above, and, on the systemd release docs/systemd.md names,
// that the scores there are current. The units' ExecStart points at
// /usr/bin/pcapsync, which verify requires to exist: they are checked as
// copies that run the binary under test.
func TestSystemdUnits(t *testing.T) {
	requireTools(t, "systemd-analyze")
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "systemd.md"))
	if err != nil {
		t.Fatal(err)
	}
	release := systemdRelease(t)
	dir := t.TempDir()
	for _, u := range systemdUnits {
		t.Run(u.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(root, "deploy", "systemd", u.file))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), "\nExecStart=/usr/bin/pcapsync ") {
				t.Fatalf("%s: no ExecStart=/usr/bin/pcapsync", u.file)
			}
			// A template is checked as an instance of it.
			name := strings.Replace(u.file, "@.", "@test.", 1)
			unit := filepath.Join(dir, name)
			body := strings.ReplaceAll(string(b), "ExecStart=/usr/bin/pcapsync ", "ExecStart="+pcapsyncBin+" ")
			if err := os.WriteFile(unit, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			// --man=no: the manual pages are installed by the package
			// (TestPackages verifies the installed units with them).
			if out, err := exec.Command("systemd-analyze", "verify", "--man=no", unit).CombinedOutput(); err != nil || len(out) > 0 {
				t.Errorf("systemd-analyze verify: %v\n%s", err, out)
			}
			out, err := exec.Command("systemd-analyze", "security", "--offline=yes", "--no-pager", unit).CombinedOutput()
			if err != nil {
				t.Fatalf("systemd-analyze security: %v\n%s", err, out)
			}
			m := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+) (\w+)`).FindStringSubmatch(string(out))
			if m == nil {
				t.Fatalf("systemd-analyze security printed no overall exposure:\n%s", out)
			}
			score, _ := strconv.ParseFloat(m[1], 64)
			if score > u.maxExposure {
				t.Errorf("exposure %s %s, want at most %.1f:\n%s", m[1], m[2], u.maxExposure, out)
			}
			row := fmt.Sprintf("| `%s` | %s %s |", u.file, m[1], m[2])
			if release == scoredSystemd && !strings.Contains(string(doc), row) {
				t.Errorf("docs/systemd.md lacks the current score of systemd %d, the row %q", release, row)
			}
		})
	}
}

// TestSystemdPreset: with the package's preset file
// (deploy/systemd/90-pcapsync.preset) "systemctl preset" enables none of
// the units and "is-enabled" says disabled; without it systemd's
// default would enable them all (what "preset: enabled" meant). On a
// file system root of its own (--root), without a running systemd.
func TestSystemdPreset(t *testing.T) {
	requireTools(t, "systemctl")
	mod, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	units, err := filepath.Glob(filepath.Join(mod, "deploy", "systemd", "*.service"))
	if err != nil || len(units) != 4 {
		t.Fatalf("deploy/systemd holds %q (%v), want the four units", units, err)
	}
	for _, withPreset := range []bool{false, true} {
		root := t.TempDir()
		install := func(src, dir string) {
			t.Helper()
			b, err := os.ReadFile(src)
			if err == nil {
				err = os.MkdirAll(filepath.Join(root, dir), 0o755)
			}
			if err == nil {
				err = os.WriteFile(filepath.Join(root, dir, filepath.Base(src)), b, 0o644)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		for _, u := range units {
			install(u, "usr/lib/systemd/system")
		}
		if withPreset {
			install(filepath.Join(mod, "deploy", "systemd", "90-pcapsync.preset"), "usr/lib/systemd/system-preset")
		}
		names := []string{"pcapsync-agent.service", "pcapsync-collector.service", "pcapsync-writer.service"}
		if b, err := exec.Command("systemctl", append([]string{"--root=" + root, "preset"}, names...)...).CombinedOutput(); err != nil {
			t.Fatalf("systemctl preset: %v\n%s", err, b)
		}
		links, _ := filepath.Glob(filepath.Join(root, "etc/systemd/system/*/pcapsync*"))
		state, _ := exec.Command("systemctl", "--root="+root, "is-enabled", "pcapsync-collector.service").Output()
		switch {
		case withPreset && (len(links) > 0 || strings.TrimSpace(string(state)) != "disabled"):
			t.Errorf("with the preset file: links %q, is-enabled %q; want none, disabled", links, state)
		case !withPreset && len(links) != len(names):
			t.Errorf("without the preset file: links %q; want systemd's default, all %d enabled (else this test proves nothing)", links, len(names))
		}
	}
}

// systemdRelease returns the release number systemd-analyze --version
// prints ("systemd 252 (252.38-1~deb12u1)").
func systemdRelease(t *testing.T) int {
	t.Helper()
	out, err := exec.Command("systemd-analyze", "--version").Output()
	if err != nil {
		t.Fatalf("systemd-analyze --version: %v", err)
	}
	var n int
	if _, err := fmt.Sscanf(string(out), "systemd %d", &n); err != nil {
		t.Fatalf("systemd-analyze --version printed %q: %v", out, err)
	}
	return n
}

// TestUnitFilters runs a live agent and a collector, each doing what
// its unit lets it (capture with a filter, spool, batch compression,
// metrics; zstd files with their index, metrics), under strace, and
// checks every system call they made against their unit's
// SystemCallFilter lines and every socket family they opened against its
// RestrictAddressFamilies: what the filters would refuse under systemd
// fails here first.
func TestUnitFilters(t *testing.T) {
	requireTools(t, append(slices.Clone(checkTools), "strace", "systemd-analyze")...)
	vn := newVethNet(t)
	ctx := testContext(t)
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	// Not pcapsyncBin: the race detector's runtime makes calls of its own.
	bin := filepath.Join(t.TempDir(), "pcapsync")
	build := exec.Command("go", "build", "-o", bin, "./cmd/pcapsync")
	build.Dir = root
	if out, err := runFor(build, 5*time.Minute); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dir := t.TempDir()
	traced := func(name string, args ...string) (*proc, string) {
		trace := filepath.Join(dir, name+".strace")
		argv := append([]string{"strace", "-f", "-qq", "-o", trace, bin}, withSummaryJSON(withInsecure(args))...)
		return startArgv(t, ctx, name, vn.A, nil, argv), trace
	}
	const port, count = 5555, 300
	udpSink(t, vn.A, netip.AddrPortFrom(vn.addrA, port))
	addr := freeport.Addr(t)
	collMetrics, agentMetrics := freeport.Addr(t), freeport.Addr(t)
	coll, collTrace := traced("collector", "collector", "--listen", addr, "--dir", filepath.Join(dir, "out"),
		"--file-compress", "zstd", "--metrics", collMetrics)
	coll.waitReady(20 * time.Second)
	agent, agentTrace := traced("agent", "agent", "--collector", addr, "--name", "f1", "--iface", "vA",
		"--spool", filepath.Join(dir, "spool"), "--compress", "auto", "--metrics", agentMetrics,
		"--filter", fmt.Sprintf("udp and dst port %d", port))
	coll.waitSessions(1, 20*time.Second)
	g := startProc(t, ctx, "gen", vn.B, "gen", "udp", "--to", fmt.Sprintf("%s:%d", vn.addrA, port),
		"--count", fmt.Sprint(count), "--rate", "2000", "--stream", "1")
	if code := g.wait(20 * time.Second); code != 0 {
		t.Fatalf("gen exited with code %d", code)
	}
	scrape := newNetnsScraper(t, vn.A)
	for _, a := range []string{collMetrics, agentMetrics} {
		if code := scrape.status(a + "/metrics"); code != 200 {
			t.Errorf("GET %s/metrics: %d", a, code)
		}
	}
	// strace passes the exit status on; the signal goes to the traced
	// process, strace's child.
	for _, p := range []*proc{agent, coll} {
		pid := tracedChild(t, p.cmd.Process.Pid)
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(20 * time.Second); code != 0 {
			t.Fatalf("%s exited with code %d", p.name, code)
		}
	}
	if s := agent.summary(); s.Acked != count {
		t.Errorf("agent summary %+v: want %d acknowledged", s, count)
	}

	for _, tc := range []struct{ unit, trace string }{
		{"pcapsync-agent.service", agentTrace},
		{"pcapsync-collector.service", collTrace},
	} {
		unit, err := os.ReadFile(filepath.Join(root, "deploy", "systemd", tc.unit))
		if err != nil {
			t.Fatal(err)
		}
		calls, families := readStrace(t, tc.trace)
		allowed := allowedSyscalls(t, string(unit))
		for _, c := range calls {
			if !allowed[c] {
				t.Errorf("%s: the process called %s, which the SystemCallFilter refuses", tc.unit, c)
			}
		}
		fams := unitSetting(string(unit), "RestrictAddressFamilies")
		for _, f := range families {
			if !slices.Contains(fams, f) {
				t.Errorf("%s: opened an %s socket; RestrictAddressFamilies allows %q", tc.unit, f, fams)
			}
		}
		if len(calls) < 20 || len(families) == 0 {
			t.Errorf("%s: strace saw %d system calls and families %q: not a trace of a run", tc.unit, len(calls), families)
		}
		t.Logf("%s: %d distinct system calls, families %q", tc.unit, len(calls), families)
	}
}

// tracedChild returns the pid of strace's (pid's) first child, waiting
// for it.
func tracedChild(t *testing.T, pid int) int {
	t.Helper()
	var child int
	err := testutil.Poll(5*time.Second, func() error {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		if err != nil {
			return err
		}
		if _, err := fmt.Sscan(string(b), &child); err != nil {
			return fmt.Errorf("strace (%d) has no child yet", pid)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return child
}

var (
	straceCall   = regexp.MustCompile(`^\d+\s+([a-z_0-9]+)\(`)
	straceSocket = regexp.MustCompile(`^\d+\s+socket\((AF_[A-Z0-9]+)`)
)

// readStrace returns the distinct system calls and socket families in
// an strace -f output file.
func readStrace(t *testing.T, path string) (calls, families []string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if m := straceCall.FindStringSubmatch(line); m != nil && !slices.Contains(calls, m[1]) {
			calls = append(calls, m[1])
		}
		if m := straceSocket.FindStringSubmatch(line); m != nil && !slices.Contains(families, m[1]) {
			families = append(families, m[1])
		}
	}
	// execve is strace starting the program, before the filter applies
	// under systemd too (systemd installs it just before).
	return slices.DeleteFunc(calls, func(c string) bool { return c == "execve" }), families
}

// unitSetting returns the space-separated values of every line "key=..."
// of unit, in order.
func unitSetting(unit, key string) []string {
	var vals []string
	for _, line := range strings.Split(unit, "\n") {
		if v, ok := strings.CutPrefix(line, key+"="); ok {
			vals = append(vals, strings.Fields(v)...)
		}
	}
	return vals
}

// allowedSyscalls returns the system calls unit's SystemCallFilter lines
// allow: those of the allow lists, less those of the lines starting with
// "~" (the form the units use), with the groups expanded by
// systemd-analyze syscall-filter.
func allowedSyscalls(t *testing.T, unit string) map[string]bool {
	t.Helper()
	allowed := map[string]bool{}
	for _, line := range strings.Split(unit, "\n") {
		v, ok := strings.CutPrefix(line, "SystemCallFilter=")
		if !ok {
			continue
		}
		deny := strings.HasPrefix(v, "~")
		for _, item := range strings.Fields(strings.TrimPrefix(v, "~")) {
			for c := range expandSyscalls(t, item, map[string]bool{}) {
				allowed[c] = !deny
			}
		}
	}
	return allowed
}

// expandSyscalls returns the system calls of item: itself, or a group's
// members, recursively.
func expandSyscalls(t *testing.T, item string, seen map[string]bool) map[string]bool {
	t.Helper()
	if !strings.HasPrefix(item, "@") {
		return map[string]bool{item: true}
	}
	out, err := exec.Command("systemd-analyze", "syscall-filter", "--no-pager", item).Output()
	if err != nil {
		t.Fatalf("systemd-analyze syscall-filter %s: %v", item, err)
	}
	calls := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n")[1:] {
		f := strings.TrimSpace(line)
		switch {
		case f == "" || strings.HasPrefix(f, "#"):
		case strings.HasPrefix(f, "@"):
			if !seen[f] {
				seen[f] = true
				for c := range expandSyscalls(t, f, seen) {
					calls[c] = true
				}
			}
		default:
			calls[f] = true
		}
	}
	return calls
}
