//go:build linux

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
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
