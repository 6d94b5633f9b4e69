//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
)

// TestVersion: pcapsync --version names the module version, the commit
// the binary was built from (checked against git when the tests run in
// a checkout) and the Go release.
func TestVersion(t *testing.T) {
	p := startProcEnv(t, testContext(t), "version", "", nil, "--version")
	if code := p.wait(10 * time.Second); code != 0 {
		t.Fatalf("--version exited %d", code)
	}
	lines := strings.Split(strings.TrimSpace(p.stdout.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "pcapsync ") || !strings.HasPrefix(lines[2], "go1.") {
		t.Fatalf("--version printed %q, want pcapsync VERSION / commit ... / goVERSION OS/ARCH", p.stdout.String())
	}
	if gitHead == "" {
		t.Logf("not a git checkout: the commit is not checked (%q)", lines[1])
	} else if !strings.HasPrefix(lines[1], "commit "+gitHead) {
		t.Errorf("--version's commit line %q, want commit %s", lines[1], gitHead)
	}
}

// writeConf writes a configuration file into dir.
func writeConf(t *testing.T, dir, name string, lines ...string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSettingsFromEnvironmentAndFile: a collector set up by a
// configuration file alone (and its log format by a variable), and two
// agents whose settings come from all three places: the command line
// (-r, and for the first the old single-dash form of --name), the
// environment (the collector's address, a --name) and a file
// (--insecure, another --name). The first agent's files land under the
// command line's name, the second's under the environment's: the
// command line wins over the environment, the environment over the
// file. Every packet arrives exactly once.
func TestSettingsFromEnvironmentAndFile(t *testing.T) {
	requireTools(t, checkTools...)
	ctx := testContext(t)
	tmp, dir := t.TempDir(), t.TempDir()
	addr, maddr := freeport.Addr(t), freeport.Addr(t)
	collConf := writeConf(t, tmp, "collector.conf",
		"# the collector of TestSettingsFromEnvironmentAndFile",
		"listen = "+addr,
		`dir = "`+dir+`"`,
		"insecure",
		"rotate-size = 64M",
		"metrics = "+maddr)
	coll := startProcEnv(t, ctx, "collector", "", []string{"PCAPSYNC_LOG_FORMAT=json"}, "collector", "--config", collConf)
	coll.metrics = maddr // from the file
	coll.waitReady(10 * time.Second)

	const count = 300
	agentConf := writeConf(t, tmp, "agent.conf", "insecure = true", "name = from-file")
	env := []string{"PCAPSYNC_COLLECTOR=" + addr, "PCAPSYNC_NAME=from-env"}
	for i, extra := range [][]string{{"-name", "from-flag"}, nil} {
		in := filepath.Join(tmp, fmt.Sprintf("in%d.pcap", i))
		writeGenFile(t, in, gen.FileConfig{Count: count, Mix: gen.MixIMIX, Stream: uint32(4 + i)})
		agent := startProcEnv(t, ctx, "agent", "", env, append([]string{"agent", "--config", agentConf, "-r", in}, extra...)...)
		if code := agent.wait(30 * time.Second); code != 0 {
			t.Fatalf("agent %d exited %d", i, code)
		}
	}
	coll.stop(20 * time.Second)

	for _, line := range strings.Split(strings.TrimSpace(coll.stderr.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil || rec["msg"] == nil {
			t.Errorf("--log-format json (from PCAPSYNC_LOG_FORMAT): not a JSON log record: %q", line)
		}
	}
	if got := agentDirs(t, dir); !slices.Equal(got, []string{"from-env", "from-flag"}) {
		t.Fatalf("collector dir holds %q, want [from-env from-flag] (the command line over the environment over the file)", got)
	}
	for i, name := range []string{"from-flag", "from-env"} {
		r := checkAgentDir(t, filepath.Join(dir, name))
		r.expectExactlyOnce(t, name, map[uint32]uint64{uint32(4 + i): count})
	}
}

// TestBadSettingsRefused: a configuration file with an unknown key or a
// bad value, and a variable with a bad value, stop the process at start
// with exit code 2 and a message naming the file and line (or the
// variable) and the reason.
func TestBadSettingsRefused(t *testing.T) {
	ctx := testContext(t)
	tmp := t.TempDir()
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"agent unknown key", nil, []string{"agent", "--config",
			writeConf(t, tmp, "a.conf", "collector = 127.0.0.1", "# a comment", "snaplenn = 96")},
			`a.conf:3: unknown setting "snaplenn": pcapsync agent has no --snaplenn`},
		{"agent bad value", nil, []string{"agent", "--config",
			writeConf(t, tmp, "b.conf", "", "snaplen = ninety")},
			`b.conf:2: snaplen = "ninety": invalid argument`},
		{"collector bad value", nil, []string{"collector", "--config",
			writeConf(t, tmp, "c.conf", "dir = "+tmp, "insecure", "rotate-size = 12Q")},
			`c.conf:3: rotate-size = "12Q"`},
		{"collector key twice", nil, []string{"collector", "--config",
			writeConf(t, tmp, "d.conf", "dir = "+tmp, "dir = /tmp")},
			`d.conf:2: dir: set again (first on line 1)`},
		{"config from environment", []string{"PCAPSYNC_CONFIG=" + writeConf(t, tmp, "e.conf", "nope")}, []string{"collector"},
			`e.conf:1: unknown setting "nope"`},
		{"bad variable", []string{"PCAPSYNC_SNAPLEN=big"}, []string{"agent", "--collector", "127.0.0.1", "-r", "x"},
			`environment PCAPSYNC_SNAPLEN="big"`},
		{"unknown variable", []string{"PCAPSYNC_SNAPLENN=96", "PCAPSYNC_SPOOL=/x"}, []string{"agent", "--collector", "127.0.0.1", "-r", "x"},
			`environment PCAPSYNC_SNAPLENN: unknown variable: pcapsync agent has no --snaplenn, nor has any other pcapsync command (did you mean PCAPSYNC_SNAPLEN?)`},
		// The agent's variable passes; the collector's own check stops it.
		{"another command's variable ignored", []string{"PCAPSYNC_SPOOL=/x"}, []string{"collector", "--dir", tmp},
			`--insecure`},
		{"missing file", nil, []string{"agent", "--config", filepath.Join(tmp, "absent.conf")},
			"absent.conf: no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startProcEnv(t, ctx, tc.name, "", tc.env, tc.args...)
			if code := p.wait(10 * time.Second); code != 2 {
				t.Errorf("exit code %d, want 2", code)
			}
			if !strings.Contains(p.stderr.String(), tc.want) {
				t.Errorf("stderr %q lacks %q", p.stderr.String(), tc.want)
			}
		})
	}
}
