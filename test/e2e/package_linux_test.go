//go:build linux

package e2e

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
)

// The paths the packages install, apart from the manual pages (one per
// command, checked separately) and the zsh completion, whose directory
// differs between Debian and RPM distributions.
var packageFiles = []string{
	"/etc/pcapsync",
	"/etc/pcapsync/agent.conf",
	"/etc/pcapsync/collector.conf",
	"/etc/pcapsync/writer.conf",
	"/usr/bin/pcapsync",
	"/usr/lib/systemd/system/pcapsync-agent.service",
	"/usr/lib/systemd/system/pcapsync-agent@.service",
	"/usr/lib/systemd/system/pcapsync-collector.service",
	"/usr/lib/systemd/system/pcapsync-writer.service",
	"/usr/lib/systemd/system-preset/90-pcapsync.preset",
	"/usr/share/bash-completion/completions/pcapsync",
	"/usr/share/doc/pcapsync/README.packaging",
	"/usr/share/doc/pcapsync/grafana/pcapsync.json",
	"/usr/share/fish/vendor_completions.d/pcapsync.fish",
}

// packageConffiles are the files marked configuration: kept when
// modified on upgrade, removed by dpkg --purge.
var packageConffiles = []string{"/etc/pcapsync/agent.conf", "/etc/pcapsync/collector.conf", "/etc/pcapsync/writer.conf"}

// packageManPages are manual pages the packages must hold (they hold one
// per command).
var packageManPages = []string{"pcapsync.1.gz", "pcapsync-agent.1.gz", "pcapsync-collector.1.gz", "pcapsync-writer.1.gz", "pcapsync-gen-certs.1.gz"}

// Where the packaged units keep state, and the example collector.conf's
// output root below it.
const (
	stateDir   = "/var/lib/pcapsync"
	outputRoot = "/var/lib/pcapsync/captures"
)

// TestPackages builds the .deb and .rpm with scripts/package.sh and
// checks the .rpm's contents with rpm -qpl. It installs the .deb with
// dpkg -i; checks the binary's version, the files, the conffiles, the
// manual pages, the completions, the pcapsync user and its state
// directory, that the installed units pass systemd-analyze verify and
// that none is enabled; runs a live capture through /usr/bin/pcapsync as
// the units run it (user pcapsync; the collector without capabilities,
// the agent with CAP_NET_RAW and CAP_NET_ADMIN alone); enables two units
// as an operator would, then purges the package and checks that nothing
// is left but the output root and the user.
func TestPackages(t *testing.T) {
	requireRoot(t)
	requireTools(t, append(slices.Clone(checkTools), "dpkg", "dpkg-deb", "rpm", "systemd-analyze", "setpriv", "getent", "bash")...)
	if exec.Command("dpkg", "-s", "pcapsync").Run() == nil {
		missing(t, "a pcapsync package is installed; this test installs and purges its own (dpkg --purge pcapsync first)")
	}
	for _, p := range []string{"/usr/bin/pcapsync", "/etc/pcapsync", stateDir} {
		if _, err := os.Lstat(p); err == nil {
			missing(t, "%s exists; this test installs the package and purges it, and must start without it", p)
		}
	}
	_, userErr := user.Lookup("pcapsync")
	hadUser := userErr == nil

	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	build := exec.Command(filepath.Join(root, "scripts", "package.sh"), out)
	build.Dir = root
	if b, err := runFor(build, 10*time.Minute); err != nil {
		t.Fatalf("scripts/package.sh: %v\n%s", err, b)
	}
	deb := onlyGlob(t, filepath.Join(out, "pcapsync_*.deb"))
	rpm := onlyGlob(t, filepath.Join(out, "pcapsync-*.rpm"))
	version := strings.TrimSuffix(cmdOut(t, "dpkg-deb", "-f", deb, "Version"), "-1")

	t.Run("rpm", func(t *testing.T) { checkRPM(t, rpm, version) })

	t.Cleanup(func() {
		if exec.Command("dpkg", "-s", "pcapsync").Run() == nil {
			if b, err := exec.Command("dpkg", "--purge", "pcapsync").CombinedOutput(); err != nil {
				t.Errorf("cleanup: dpkg --purge: %v\n%s", err, b)
			}
		}
		os.RemoveAll(stateDir)
		links, _ := filepath.Glob("/etc/systemd/system/*/pcapsync*")
		for _, l := range links {
			os.Remove(l)
		}
		if !hadUser {
			exec.Command("userdel", "pcapsync").Run()
			exec.Command("groupdel", "pcapsync").Run()
		}
	})
	cmdOut(t, "dpkg", "-i", deb)
	listed := strings.Fields(cmdOut(t, "dpkg", "-L", "pcapsync"))
	checkInstalled(t, version, listed)
	checkInstalledUnits(t)

	captured := packagedCapture(t)

	// An operator enabled units; removal must disable them (systemctl
	// enable edits links only, without a running systemd too).
	cmdOut(t, "systemctl", "--no-reload", "enable", "pcapsync-collector.service", "pcapsync-agent@pkgtest.service")
	if enabled, _ := filepath.Glob("/etc/systemd/system/*/pcapsync*"); len(enabled) != 2 {
		t.Errorf("systemctl enable made %q, want two links", enabled)
	}
	cmdOut(t, "dpkg", "--purge", "pcapsync")
	checkPurged(t, listed, captured)
}

// checkRPM checks the .rpm's version, files, configuration files and
// scripts without installing it.
func checkRPM(t *testing.T, rpm, version string) {
	if got := cmdOut(t, "rpm", "-qp", "--qf", "%{VERSION}", rpm); got != version {
		t.Errorf("rpm version %q, want %q", got, version)
	}
	want := append(slices.Clone(packageFiles), "/usr/share/zsh/site-functions/_pcapsync")
	checkFileList(t, "rpm -qpl", strings.Fields(cmdOut(t, "rpm", "-qpl", rpm)), want)
	if got := strings.Fields(cmdOut(t, "rpm", "-qpc", rpm)); !slices.Equal(got, packageConffiles) {
		t.Errorf("rpm -qpc: %q, want %q", got, packageConffiles)
	}
	scripts := cmdOut(t, "rpm", "-qp", "--scripts", rpm)
	for _, w := range []string{"postinstall scriptlet", "useradd --system", "preuninstall scriptlet", "postuninstall scriptlet"} {
		if !strings.Contains(scripts, w) {
			t.Errorf("rpm -qp --scripts lacks %q:\n%s", w, scripts)
		}
	}
}

// checkFileList checks that list (a package's files) holds every path of
// want and the manual pages, and nothing else but directories above them
// and other manual pages.
func checkFileList(t *testing.T, what string, list, want []string) {
	t.Helper()
	for _, w := range want {
		if !slices.Contains(list, w) {
			t.Errorf("%s lacks %s", what, w)
		}
	}
	for _, m := range packageManPages {
		if !slices.Contains(list, "/usr/share/man/man1/"+m) {
			t.Errorf("%s lacks /usr/share/man/man1/%s", what, m)
		}
	}
	for _, p := range list {
		if slices.Contains(want, p) || strings.HasPrefix(p, "/usr/share/man/man1/pcapsync") && strings.HasSuffix(p, ".1.gz") {
			continue
		}
		above := slices.ContainsFunc(want, func(w string) bool { return strings.HasPrefix(w, p+"/") })
		if !above && p != "/usr/share/man" && p != "/usr/share/man/man1" {
			t.Errorf("%s holds %s, which it should not", what, p)
		}
	}
}

// checkInstalled checks what dpkg -i installed (listed: dpkg -L).
func checkInstalled(t *testing.T, version string, listed []string) {
	t.Helper()
	checkFileList(t, "dpkg -L", listed, append(slices.Clone(packageFiles), "/usr/share/zsh/vendor-completions/_pcapsync"))
	if v := cmdOut(t, "/usr/bin/pcapsync", "--version"); !strings.HasPrefix(v, "pcapsync "+version+"\ncommit ") || strings.Contains(v, "commit unknown") {
		t.Errorf("/usr/bin/pcapsync --version: %q, want pcapsync %s and its commit", v, version)
	}
	conf, err := os.ReadFile("/var/lib/dpkg/info/pcapsync.conffiles")
	if err != nil {
		t.Error(err)
	} else if got := strings.Fields(string(conf)); !slices.Equal(got, packageConffiles) {
		t.Errorf("conffiles %q, want %q", got, packageConffiles)
	}
	for _, m := range packageManPages {
		// Titled by its command, as git's: pcapsync-gen-certs.1 is PCAPSYNC-GEN-CERTS(1).
		title := strings.ToUpper(strings.TrimSuffix(m, ".1.gz"))
		if page := gunzip(t, "/usr/share/man/man1/"+m); !strings.Contains(page, `.TH "`+title+`" "1"`) {
			t.Errorf("%s is not the section 1 manual page %s(1):\n%.200s", m, title, page)
		}
	}
	for _, c := range []struct{ file, want string }{
		{"/usr/share/bash-completion/completions/pcapsync", "complete -o default -F __start_pcapsync pcapsync"},
		{"/usr/share/zsh/vendor-completions/_pcapsync", "#compdef pcapsync"},
		{"/usr/share/fish/vendor_completions.d/pcapsync.fish", "complete -c pcapsync"},
	} {
		if b, err := os.ReadFile(c.file); err != nil || !strings.Contains(string(b), c.want) {
			t.Errorf("%s: %v; want a completion script holding %q", c.file, err, c.want)
		}
	}
	if b, err := exec.Command("bash", "-n", "/usr/share/bash-completion/completions/pcapsync").CombinedOutput(); err != nil {
		t.Errorf("bash -n on the bash completion: %v\n%s", err, b)
	}
	u, err := user.Lookup("pcapsync")
	if err != nil {
		t.Fatalf("the package made no pcapsync user: %v", err)
	}
	if uid := mustAtoi(t, u.Uid); uid == 0 || uid >= 1000 {
		t.Errorf("pcapsync has uid %d, want a system user (1 to 999)", uid)
	}
	st := statT(t, stateDir)
	if fmt.Sprint(st.Uid) != u.Uid || fmt.Sprint(st.Gid) != u.Gid || st.Mode&0o777 != 0o750 {
		t.Errorf("%s: uid %d gid %d mode %o, want pcapsync's (%s:%s) and 0750", stateDir, st.Uid, st.Gid, st.Mode&0o777, u.Uid, u.Gid)
	}
}

// checkInstalledUnits: the installed units pass systemd-analyze verify
// (which also finds their manual pages and /usr/bin/pcapsync), the
// package enabled none, and its preset file keeps them disabled when
// presets are applied (systemctl preset, as RPM's scriptlets and
// "systemctl preset-all" do; without it systemd's default is enable).
func checkInstalledUnits(t *testing.T) {
	t.Helper()
	units := []string{"pcapsync-agent.service", "pcapsync-agent@pkgtest.service", "pcapsync-collector.service", "pcapsync-writer.service"}
	if b, err := exec.Command("systemd-analyze", append([]string{"verify"}, units...)...).CombinedOutput(); err != nil || len(b) > 0 {
		t.Errorf("systemd-analyze verify %s: %v\n%s", strings.Join(units, " "), err, b)
	}
	enabled, _ := filepath.Glob("/etc/systemd/system/*/pcapsync*")
	if len(enabled) > 0 {
		t.Errorf("the package enabled units: %q", enabled)
	}
	// --root: applied to the file system, without a running systemd.
	presetUnits := []string{"pcapsync-agent.service", "pcapsync-collector.service", "pcapsync-writer.service"}
	if b, err := exec.Command("systemctl", append([]string{"--root=/", "preset"}, presetUnits...)...).CombinedOutput(); err != nil {
		t.Errorf("systemctl --root=/ preset: %v\n%s", err, b)
	}
	if enabled, _ := filepath.Glob("/etc/systemd/system/*/pcapsync*"); len(enabled) > 0 {
		t.Errorf("systemctl preset enabled units: %q (the preset file should disable them)", enabled)
		for _, l := range enabled {
			os.Remove(l)
		}
	}
}

// packagedCapture runs /usr/bin/pcapsync as the units do: a collector as
// user pcapsync without capabilities writing below the output root, an
// agent as user pcapsync with CAP_NET_RAW and CAP_NET_ADMIN capturing on
// a veth and spooling below the state directory. It checks the files and
// returns the agent's directory.
func packagedCapture(t *testing.T) string {
	t.Helper()
	vn := newVethNet(t)
	ctx := testContext(t)
	const (
		port  = 5555
		count = 300
	)
	udpSink(t, vn.A, netip.AddrPortFrom(vn.addrA, port))
	asUnit := func(caps string, args ...string) []string {
		argv := []string{"setpriv", "--reuid=pcapsync", "--regid=pcapsync", "--init-groups",
			"--inh-caps=-all" + caps, "--ambient-caps=-all" + caps, "--bounding-set=-all" + caps, "--no-new-privs",
			"/usr/bin/pcapsync"}
		return append(argv, withSummaryJSON(withInsecure(args))...)
	}
	addr := freeport.Addr(t)
	coll := startArgv(t, ctx, "collector (installed)", vn.A, nil, asUnit("", "collector", "--listen", addr, "--dir", outputRoot,
		"--metrics", freeport.Addr(t)))
	coll.waitReady(10 * time.Second)
	agent := startArgv(t, ctx, "agent (installed)", vn.A, nil, asUnit(",+net_raw,+net_admin", "agent", "--collector", addr,
		"--name", "pkg1", "--iface", "vA", "--spool", stateDir+"/spool", "--filter", fmt.Sprintf("udp and dst port %d", port)))
	coll.waitSessions(1, 15*time.Second)
	g := startProc(t, ctx, "gen", vn.B, "gen", "udp", "--to", fmt.Sprintf("%s:%d", vn.addrA, port),
		"--count", fmt.Sprint(count), "--rate", "2000", "--stream", "1")
	if code := g.wait(20 * time.Second); code != 0 {
		t.Fatalf("gen exited with code %d", code)
	}
	agent.stop(20 * time.Second)
	if s := agent.summary(); s.Read != count || s.Acked != count || s.Dropped != 0 {
		t.Errorf("agent summary %+v: want %d read and acknowledged, none dropped", s, count)
	}
	coll.stop(20 * time.Second)

	dir := filepath.Join(outputRoot, "pkg1")
	checkAgentDir(t, dir).expectExactlyOnce(t, "pkg1", map[uint32]uint64{1: count})
	u, _ := user.Lookup("pcapsync")
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	for _, f := range files {
		if st := statT(t, f); fmt.Sprint(st.Uid) != u.Uid {
			t.Errorf("%s: owner uid %d, want pcapsync's %s", f, st.Uid, u.Uid)
		}
	}
	if _, err := os.Stat(stateDir + "/spool"); err != nil {
		t.Errorf("the agent made no spool: %v", err)
	}
	return dir
}

// checkPurged: after dpkg --purge, every file dpkg -L listed is gone,
// /etc/pcapsync too, dpkg knows nothing of the package, no unit is
// enabled, the state
// directory holds only the output root, with the captured files, and the
// pcapsync user is kept (it still owns them).
func checkPurged(t *testing.T, listed []string, captured string) {
	t.Helper()
	if b, err := exec.Command("dpkg", "-s", "pcapsync").CombinedOutput(); err == nil {
		t.Errorf("dpkg -s pcapsync after purge:\n%s", b)
	}
	left, _ := filepath.Glob("/var/lib/dpkg/info/pcapsync.*")
	if len(left) > 0 {
		t.Errorf("dpkg still holds %q", left)
	}
	if enabled, _ := filepath.Glob("/etc/systemd/system/*/pcapsync*"); len(enabled) > 0 {
		t.Errorf("links enabling units are left: %q", enabled)
	}
	for _, p := range listed {
		fi, err := os.Lstat(p)
		if err == nil && (!fi.IsDir() || p == "/etc/pcapsync" || strings.Contains(p, "pcapsync")) {
			t.Errorf("%s is left after purge", p)
		}
	}
	if ents, err := os.ReadDir(stateDir); err != nil || len(ents) != 1 || ents[0].Name() != filepath.Base(outputRoot) {
		t.Errorf("%s after purge: %v %v, want only %s", stateDir, ents, err, filepath.Base(outputRoot))
	}
	if files, _ := filepath.Glob(filepath.Join(captured, "*.pcapng")); len(files) == 0 {
		t.Errorf("purge removed the captured files in %s", captured)
	}
	if _, err := user.Lookup("pcapsync"); err != nil {
		t.Errorf("purge removed the pcapsync user: %v", err)
	}
}

// runFor runs cmd, killing it after d, and returns its combined output.
func runFor(cmd *exec.Cmd, d time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	c := exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...)
	c.Dir, c.Env = cmd.Dir, cmd.Env
	return c.CombinedOutput()
}

// cmdOut runs name with args for at most a minute, fails t if it fails,
// and returns its standard output without surrounding white space.
func cmdOut(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, b, stderr.String())
	}
	return strings.TrimSpace(string(b))
}

func onlyGlob(t *testing.T, pattern string) string {
	t.Helper()
	m, _ := filepath.Glob(pattern)
	if len(m) != 1 {
		t.Fatalf("%s matches %q, want one file", pattern, m)
	}
	return m[0]
}

func gunzip(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Error(err)
		return ""
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Errorf("%s: %v", path, err)
		return ""
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Errorf("%s: %v", path, err)
	}
	return string(b)
}

func statT(t *testing.T, path string) *syscall.Stat_t {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t)
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return n
}
