package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func TestSingleDashLong(t *testing.T) {
	root := newRoot(streams{&bytes.Buffer{}, &bytes.Buffer{}})
	for _, tc := range []struct{ in, want []string }{
		{[]string{"agent", "-collector", "h", "-iface=eth0", "-insecure"}, []string{"agent", "--collector", "h", "--iface=eth0", "--insecure"}},
		{[]string{"agent", "-i", "eth0", "-s", "96", "-pv", "tcp"}, nil},
		{[]string{"agent", "-pi", "eth0", "-snaplen", "96"}, []string{"agent", "-pi", "eth0", "--snaplen", "96"}},
		// A flag's value is left alone, even when it looks like a flag.
		{[]string{"agent", "--name", "-insecure", "-snaplen", "5"}, []string{"agent", "--name", "-insecure", "--snaplen", "5"}},
		{[]string{"agent", "-filter", "-x", "--", "-name"}, []string{"agent", "--filter", "-x", "--", "-name"}},
		// Old names through their aliases, and -help.
		{[]string{"tail", "-collector-admin", "h:1", "-help"}, []string{"tail", "--collector-admin", "h:1", "--help"}},
		{[]string{"status", "-collector-admin=h:1"}, []string{"status", "--collector-admin=h:1"}},
		{[]string{"gen", "certs", "-dir", "d", "-config", "f"}, []string{"gen", "certs", "--dir", "d", "--config", "f"}},
		// Not a flag of the command: left for the parser to refuse.
		{[]string{"agent", "-nosuch"}, nil},
	} {
		want := tc.want
		if want == nil {
			want = tc.in
		}
		if got := singleDashLong(root, tc.in); !slices.Equal(got, want) {
			t.Errorf("singleDashLong(%q) = %q, want %q", tc.in, got, want)
		}
	}
}

func TestParseConfig(t *testing.T) {
	for _, tc := range []struct {
		text string
		want []setting
		err  string
	}{
		{"\uFEFF# comment\n\n  name = web1  \ninsecure\nfilter = tcp port 80 and not host 10.0.0.1\n",
			[]setting{{line: 3, name: "name", value: "web1"}, {line: 4, name: "insecure", bare: true}, {line: 5, name: "filter", value: "tcp port 80 and not host 10.0.0.1"}}, ""},
		{`spool = "/var/spool/pcap sync"` + "\n" + `token-file = ""`,
			[]setting{{line: 1, name: "spool", value: "/var/spool/pcap sync"}, {line: 2, name: "token-file", value: ""}}, ""},
		{"a = 1\n--snaplen = 96\n", nil, `f.conf:2: "--snaplen": write the flag's name without dashes ("snaplen")`},
		{"snap len = 96\n", nil, `f.conf:1: "snap len = 96": want NAME = VALUE`},
		{"= 96\n", nil, `f.conf:1: "= 96": want NAME = VALUE`},
		{"name = \"web1\n", nil, `f.conf:1: name: the quoted value "web1 does not end`},
		{"name = \xff\n", nil, "f.conf:1: not UTF-8 text"},
	} {
		cf, err := parseConfig("f.conf", []byte(tc.text))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseConfig(%q): err = %v, want %q", tc.text, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseConfig(%q): %v", tc.text, err)
			continue
		}
		if !slices.Equal(cf.settings, tc.want) {
			t.Errorf("parseConfig(%q) = %+v, want %+v", tc.text, cf.settings, tc.want)
		}
	}
}

// testCommand is a root with --config and a leaf "leaf" whose flags
// record what they were set to, run through applySettings with env.
func runSettings(t *testing.T, env map[string]string, args ...string) (map[string]string, error) {
	t.Helper()
	got := map[string]string{}
	root := &cobra.Command{Use: "p", SilenceErrors: true, SilenceUsage: true}
	root.PersistentFlags().String("config", "", "")
	root.PersistentPreRunE = func(c *cobra.Command, args []string) error {
		return applySettings(c, args, env)
	}
	leafCmd := leaf("leaf", "", "", cobra.ArbitraryArgs, func(fs *pflag.FlagSet) runFunc {
		fs.IntP("snaplen", "s", 262144, "")
		fs.String("name", "host", "")
		fs.String("filter", "", "")
		fs.Bool("insecure", false, "")
		var taps []string
		fs.Func("tap", "", func(s string) error { taps = append(taps, s); return nil })
		fs.String("metrics", "", "")
		aliases(fs, map[string]string{"collector-admin": "metrics"})
		return func(_ context.Context, args []string) error {
			fs.VisitAll(func(f *pflag.Flag) { got[f.Name] = f.Value.String() })
			got["taps"] = strings.Join(taps, ",")
			got["args"] = strings.Join(args, " ")
			return nil
		}
	})
	annotate(leafCmd.Flags(), "tap", annRepeatable)
	annotate(leafCmd.Flags(), "filter", annPositional)
	other := leaf("other", "", "", cobra.NoArgs, func(fs *pflag.FlagSet) runFunc {
		fs.String("spool", "", "")
		fs.String("snaplenx", "", "")
		return func(context.Context, []string) error { return nil }
	})
	root.AddCommand(leafCmd, other)
	root.SetArgs(singleDashLong(root, args))
	return got, root.Execute()
}

func TestSettingsPrecedence(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "p.conf")
	if err := os.WriteFile(conf, []byte("snaplen = 200\nname = file\ninsecure\ntap = a:1\ntap = b:2\nfilter = port 1\ncollector-admin = m:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want map[string]string
	}{
		{nil, []string{"leaf"}, map[string]string{"snaplen": "262144", "name": "host", "insecure": "false", "taps": ""}},
		{nil, []string{"leaf", "--config", conf}, map[string]string{"snaplen": "200", "name": "file", "insecure": "true", "taps": "a:1,b:2", "filter": "port 1", "metrics": "m:1"}},
		{map[string]string{"PCAPSYNC_SNAPLEN": "120", "PCAPSYNC_CONFIG": conf}, []string{"leaf"}, map[string]string{"snaplen": "120", "name": "file"}},
		{map[string]string{"PCAPSYNC_SNAPLEN": "120", "PCAPSYNC_NAME": "env"}, []string{"leaf", "--config", conf, "-s", "80"}, map[string]string{"snaplen": "80", "name": "env"}},
		// Positional words stand for the filter given on the command line.
		{map[string]string{"PCAPSYNC_FILTER": "port 2"}, []string{"leaf", "--config", conf, "port", "3"}, map[string]string{"filter": "", "args": "port 3"}},
		{map[string]string{"PCAPSYNC_FILTER": "port 2"}, []string{"leaf", "--config", conf}, map[string]string{"filter": "port 2"}},
		// The command line's value replaces a repeatable flag's file values.
		{nil, []string{"leaf", "--config", conf, "--tap", "c:3"}, map[string]string{"taps": "c:3"}},
		// A variable of another command's flag, of no flag but one of
		// the scripts', or empty: ignored.
		{map[string]string{"PCAPSYNC_SPOOL": "/s", "PCAPSYNC_TRACE": "/t", "PCAPSYNC_NAMEE": ""}, []string{"leaf"}, map[string]string{"name": "host"}},
	} {
		got, err := runSettings(t, tc.env, tc.args...)
		if err != nil {
			t.Errorf("%v %q: %v", tc.env, tc.args, err)
			continue
		}
		for k, w := range tc.want {
			if got[k] != w {
				t.Errorf("%v %q: %s = %q, want %q", tc.env, tc.args, k, got[k], w)
			}
		}
	}
}

func TestSettingsRefused(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{nil, []string{"leaf", "--config", write("a", "name = x\nsnaplenn = 1\n")}, `a:2: unknown setting "snaplenn": p leaf has no --snaplenn`},
		{nil, []string{"leaf", "--config", write("b", "snaplen = big\n")}, `b:1: snaplen = "big": invalid argument "big"`},
		{nil, []string{"leaf", "--config", write("c", "name = x\nname = y\n")}, "c:2: name: set again (first on line 1); it takes one value"},
		{nil, []string{"leaf", "--config", write("d", "snaplen\n")}, "d:1: snaplen: needs a value (snaplen = VALUE)"},
		{nil, []string{"leaf", "--config", write("e", "config = other\n")}, "e:1: config: a configuration file cannot name another one"},
		{nil, []string{"leaf", "--config", write("f", "help\n")}, `f:1: unknown setting "help"`},
		{map[string]string{"PCAPSYNC_SNAPLEN": "x"}, []string{"leaf"}, `environment PCAPSYNC_SNAPLEN="x"`},
		{map[string]string{"PCAPSYNC_CONFIG": filepath.Join(dir, "absent")}, []string{"leaf"}, "absent: no such file"},
		// A variable that is no flag of any command: refused, with the
		// close names of this command's flags, else of the others'.
		{map[string]string{"PCAPSYNC_SNAPLENN": "96"}, []string{"leaf"}, "environment PCAPSYNC_SNAPLENN: unknown variable: p leaf has no --snaplenn, nor has any other pcapsync command (did you mean PCAPSYNC_SNAPLEN?)"},
		{map[string]string{"PCAPSYNC_SPOOLL": "/s"}, []string{"leaf"}, "(did you mean PCAPSYNC_SPOOL of p other?)"},
		{map[string]string{"PCAPSYNC_ZZZ": "1", "PCAPSYNC_NAME": "n"}, []string{"leaf"}, "PCAPSYNC_ZZZ: unknown variable: p leaf has no --zzz, nor has any other pcapsync command"},
		{map[string]string{"PCAPSYNC_COLLECTOR_ADMIN": "m:1"}, []string{"leaf"}, "--collector-admin is an old name of p leaf's --metrics: set PCAPSYNC_METRICS"},
		{map[string]string{"PCAPSYNC_snaplen": "96"}, []string{"leaf"}, "PCAPSYNC_snaplen: unknown variable: a flag's variable is PCAPSYNC_ and its long name in capitals, _ for - (did you mean PCAPSYNC_SNAPLEN?)"},
	} {
		_, err := runSettings(t, tc.env, tc.args...)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %q: err = %v, want a usage error with %q", tc.env, tc.args, err, tc.want)
		}
	}
}

func TestFormatVersion(t *testing.T) {
	vcs := []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.time", Value: "2026-11-23T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}
	for _, tc := range []struct {
		name     string
		settings []debug.BuildSetting
		st       stamp
		want     []string
	}{
		{"vcs", vcs, stamp{}, []string{"pcapsync v1.2.3\n", "commit abc123 (2026-11-23T10:00:00Z, with uncommitted changes)\n", "go1.26.8 "}},
		{"no vcs", nil, stamp{}, []string{"pcapsync v1.2.3\n", "commit unknown"}},
		{"stamped", nil, stamp{"1.4.0~git20261124.21dbd27", "21dbd27f"}, []string{"pcapsync 1.4.0~git20261124.21dbd27\n", "commit 21dbd27f\n"}},
		{"vcs beats stamped commit", vcs, stamp{"", "21dbd27f"}, []string{"pcapsync v1.2.3\n", "commit abc123 ("}},
	} {
		bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}, Settings: tc.settings}
		got := formatVersion(bi, tc.st)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: formatVersion = %q, lacks %q", tc.name, got, w)
			}
		}
	}
}

// TestFormatAgentVersion: the one line an agent tells its collector.
func TestFormatAgentVersion(t *testing.T) {
	vcs := []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}
	pseudo := "v0.0.0-20261128010241-0123456789ab"
	for _, tc := range []struct {
		name     string
		main     string // the module's version; v1.2.3 when empty
		settings []debug.BuildSetting
		st       stamp
		want     string
	}{
		{"vcs", "", vcs, stamp{}, "v1.2.3 0123456789ab+dirty"},
		{"clean", "", vcs[:1], stamp{}, "v1.2.3 0123456789ab"},
		{"no vcs", "", nil, stamp{}, "v1.2.3"},
		{"stamped commit", "", nil, stamp{"", "21dbd27f"}, "v1.2.3 21dbd27f"},
		{"stamped release", "", vcs, stamp{"1.4.0~git20261124.21dbd27", "21dbd27f"}, "1.4.0~git20261124.21dbd27"},
		{"pseudo-version", pseudo, vcs[:1], stamp{}, pseudo},
		{"pseudo-version dirty", pseudo + "+dirty", vcs, stamp{}, pseudo + "+dirty"}, // Go 1.24+ marks it
		{"pseudo-version, dirty unmarked", pseudo, vcs, stamp{}, pseudo + "+dirty"},
		{"pseudo-version of another commit", "v0.0.0-20261128010241-aaaaaaaaaaaa", vcs[:1], stamp{}, "v0.0.0-20261128010241-aaaaaaaaaaaa 0123456789ab"},
	} {
		bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: cmp.Or(tc.main, "v1.2.3")}, Settings: tc.settings}
		if got := formatAgentVersion(bi, tc.st); got != tc.want {
			t.Errorf("%s: formatAgentVersion = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestUsageListsCommands: pcapsync --help lists every command and its
// synopsis line every subcommand, as the command tree has them.
func TestUsageListsCommands(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	help := out.String()
	root := newRoot(streams{io.Discard, io.Discard})
	n := 0
	for _, c := range root.Commands() {
		if !c.IsAvailableCommand() || c.Name() == "help" {
			continue
		}
		n++
		if !strings.Contains(help, "\n  "+c.Name()+" ") {
			t.Errorf("pcapsync --help does not list %q in its commands", c.Name())
		}
		_, line, ok := strings.Cut(help, "\n  pcapsync "+c.Name()+" ")
		if !ok {
			t.Errorf("pcapsync --help has no synopsis of %q", c.Name())
			continue
		}
		line, _, _ = strings.Cut(line, "\n")
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() && !slices.Contains(strings.Split(strings.Fields(line)[0], "|"), sub.Name()) {
				t.Errorf("the synopsis of %s lacks %s: %q", c.Name(), sub.Name(), line)
			}
		}
	}
	if want := 10 + len(labCommands(streams{})); n < want {
		t.Errorf("%d commands in the tree, want at least %d", n, want)
	}
}

// TestManPagesAndCompletion: the manual pages and the shell completion
// come from the flag definitions.
func TestManPagesAndCompletion(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	if err := run(context.Background(), []string{"gen", "man", "--dir", dir}, &out, &out); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(dir, "pcapsync-agent.1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{`\fB-i\fP, \fB--iface\fP`, `\fB-s\fP, \fB--snaplen\fP=262144`} {
		if !strings.Contains(string(page), w) {
			t.Errorf("pcapsync-agent.1 lacks %q", w)
		}
	}
	for _, name := range []string{"pcapsync.1", "pcapsync-collector.1", "pcapsync-gen-certs.1", "pcapsync-query.1"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Error(err)
		}
	}
	// Each page is titled by its file's name, as git's (GIT-LOG(1) in
	// git-log.1): PCAPSYNC-GEN-CERTS(1).
	pages, _ := filepath.Glob(filepath.Join(dir, "*.1"))
	if len(pages) < 19 {
		t.Fatalf("%d pages", len(pages))
	}
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		title := strings.ToUpper(strings.TrimSuffix(filepath.Base(p), ".1"))
		if want := ".TH \"" + title + "\" \"1\""; !strings.Contains(string(b), want) {
			th, _, _ := strings.Cut(string(b[strings.Index(string(b), ".TH"):]), "\n")
			t.Errorf("%s: %s, want %s", filepath.Base(p), th, want)
		}
	}
	out.Reset()
	if err := run(context.Background(), []string{"__complete", "agent", "--snap"}, &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "--snaplen\t") {
		t.Errorf("completing agent --snap: %q, want --snaplen first", out.String())
	}
	out.Reset()
	if err := run(context.Background(), []string{"completion", "bash"}, &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	sh := filepath.Join(dir, "pcapsync.bash")
	if err := os.WriteFile(sh, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("bash", "-n", sh).CombinedOutput(); err != nil {
		t.Errorf("bash -n on the completion script: %v\n%s", err, b)
	}
}

// TestExampleConfigs: the example configuration files under deploy/
// hold only settings their command has, with values it accepts.
func TestExampleConfigs(t *testing.T) {
	for _, tc := range []struct{ file, command string }{
		{"../../deploy/agent.conf", "agent"},
		{"../../deploy/collector.conf", "collector"},
		{"../../deploy/writer.conf", "writer"},
	} {
		root := newRoot(streams{&bytes.Buffer{}, &bytes.Buffer{}})
		c := subcommand(root, tc.command)
		c.InheritedFlags()
		cf, err := readConfigFile(tc.file)
		if err != nil {
			t.Fatal(err)
		}
		if len(cf.settings) < 5 {
			t.Errorf("%s: %d settings; an example should show the usual ones", tc.file, len(cf.settings))
		}
		if err := cf.check(c.Flags(), c.CommandPath(), nil); err != nil {
			t.Error(err)
		}
		for _, s := range cf.settings {
			if err := cf.apply(c.Flags(), c.Flags().Lookup(s.name).Name); err != nil {
				t.Error(err)
			}
		}
	}
}
