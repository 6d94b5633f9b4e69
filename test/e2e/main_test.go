//go:build linux

// Package e2e runs the real pcapsync binary end to end: collectors,
// agents and traffic generators as separate processes, live capture on
// a veth pair between network namespaces the tests create, and output
// files checked with this repository's pcap reader and with Wireshark's
// tshark and capinfos.
//
// Prerequisites: tshark and capinfos in PATH for every test; root and
// iproute2's ip for the live-capture test. A test whose prerequisites are
// missing is skipped, unless PCAPSYNC_E2E_REQUIRE=1 is set (the project's
// test script sets it), in which case it fails.
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/agent"
	"github.com/pcapsync/pcapsync/internal/collector"
	"github.com/pcapsync/pcapsync/internal/flow"
	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/raceflag"
	"github.com/pcapsync/pcapsync/internal/serve"
	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
)

// testTimeout bounds every test; a process still running then is killed.
const testTimeout = 60 * time.Second

// pcapsyncBin is the binary built once by TestMain.
var pcapsyncBin string

// gitHead is the commit the binary was built from, "" when it was built
// without VCS information.
var gitHead string

// raceBuild: the tests run with -race, so the binary under test is built
// with it too, and data races in the product fail the end-to-end runs.
const raceBuild = raceflag.Enabled

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// The collectors the tests start delete no file for the disk's free
	// space unless a test says so (--retain-free, which wins over the
	// variable): the free space of the machine that runs the tests is
	// not theirs to judge, and with the default (10%) a disk under 10%
	// free deleted the files that tests then looked for.
	os.Setenv("PCAPSYNC_RETAIN_FREE", "0")
	tmp, err := os.MkdirTemp("", "pcapsync-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: locating the module root:", err)
		return 1
	}
	pcapsyncBin = filepath.Join(tmp, "pcapsync")
	// Stamp the commit into the binary when this is a git clone, so
	// that --version can be checked against it. (go build finds a
	// repository by its .git directory: a "git worktree" checkout, whose
	// .git is a file, is built without.)
	vcs := "-buildvcs=false"
	if fi, err := os.Stat(filepath.Join(root, ".git")); err == nil && fi.IsDir() {
		if out, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output(); err == nil {
			gitHead, vcs = strings.TrimSpace(string(out)), "-buildvcs=true"
		}
	}
	args := []string{"build", vcs, "-o", pcapsyncBin}
	if raceBuild {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "./cmd/pcapsync")...)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: go build ./cmd/pcapsync: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// moduleRoot returns the directory of the go.mod this package belongs to.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err == nil {
		if gomod := strings.TrimSpace(string(out)); gomod != "" && gomod != os.DevNull {
			return filepath.Dir(gomod), nil
		}
	}
	root, aerr := filepath.Abs(filepath.Join("..", ".."))
	if aerr != nil {
		return "", aerr
	}
	if _, serr := os.Stat(filepath.Join(root, "go.mod")); serr != nil {
		return "", fmt.Errorf("go env GOMOD: %v; ../../go.mod: %w", err, serr)
	}
	return root, nil
}

// requireEnv is set by the project's test script: missing prerequisites
// are failures there, not skips.
const requireEnv = "PCAPSYNC_E2E_REQUIRE"

// missing skips t, or fails it when requireEnv is "1".
func missing(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv(requireEnv) == "1" {
		t.Fatalf("prerequisite missing (%s=1 makes this a failure): %s", requireEnv, msg)
	}
	t.Skipf("skipping: %s (set %s=1 to make this a failure)", msg, requireEnv)
}

// requireTools skips (or fails) t unless every tool is in PATH.
func requireTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			missing(t, "needs %s in PATH: %v", tool, err)
		}
	}
}

// requireRoot skips (or fails) t unless it runs as root.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		missing(t, "needs root to create network namespaces and capture packets (run go test as root)")
	}
}

// checkTools are what every test needs to check its output files.
var checkTools = []string{"tshark", "capinfos"}

// testContext returns a context that ends after testTimeout or when the
// test ends.
func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// proc is one running pcapsync process (optionally inside a network
// namespace, through "ip netns exec", which execs in place so signals
// reach pcapsync itself). It is killed in t.Cleanup if still running, and
// its output is logged if the test failed.
type proc struct {
	t       *testing.T
	name    string
	netns   string // "" for the test's own
	metrics string // its --metrics address, "" without one (or with port 0)
	cmd     *exec.Cmd
	stdout  testutil.Buffer
	stderr  testutil.Buffer
	done    chan struct{} // closed once the process was waited for
}

// securityFlags choose how a collector or agent secures its connections.
var securityFlags = []string{"--insecure", "--tls-cert", "--tls-key", "--tls-client-ca", "--tls-ca", "--tls-server-name", "--tls", "--token-file"}

// withInsecure adds --insecure to a collector's or agent's command line
// that chooses no transport security, so that every test not about
// security runs over plain TCP as before. A test about security passes
// its own flags.
func withInsecure(args []string) []string {
	if len(args) == 0 || args[0] != "collector" && args[0] != "agent" {
		return args
	}
	if args[0] == "agent" && slices.Contains(args, "--kafka") {
		return args // the --kafka-* flags choose the security to the brokers
	}
	for _, a := range args[1:] {
		name, _, _ := strings.Cut(a, "=")
		if slices.Contains(securityFlags, name) || slices.Contains(securityFlags, "-"+name) {
			return args
		}
	}
	return append([]string{args[0], "--insecure"}, args[1:]...)
}

// withSummaryJSON adds --summary json to a collector's or agent's
// command line that chooses no summary format, so that the tests read
// the summary as JSON (proc.summary, proc.collectorSummary).
func withSummaryJSON(args []string) []string {
	if len(args) == 0 || args[0] != "collector" && args[0] != "agent" {
		return args
	}
	for _, a := range args[1:] {
		if name, _, _ := strings.Cut(a, "="); name == "--summary" || name == "-summary" {
			return args
		}
	}
	return append([]string{args[0], "--summary", "json"}, args[1:]...)
}

// startProc starts pcapsync with args, in namespace netns unless it is "".
// A collector or agent without security flags gets --insecure, and
// without --summary gets --summary json.
func startProc(t *testing.T, ctx context.Context, name, netns string, args ...string) *proc {
	t.Helper()
	return startProcEnv(t, ctx, name, netns, nil, withSummaryJSON(withInsecure(args))...)
}

// startProcEnv starts pcapsync with args as they are, in namespace netns
// unless it is "", with env added to the environment.
func startProcEnv(t *testing.T, ctx context.Context, name, netns string, env []string, args ...string) *proc {
	t.Helper()
	return startArgv(t, ctx, name, netns, env, append([]string{pcapsyncBin}, args...))
}

// startProcAs is startProcEnv with pcapsync run by the command wrap
// (such as setpriv with its options) unless it is empty.
func startProcAs(t *testing.T, ctx context.Context, name, netns string, wrap, env []string, args ...string) *proc {
	t.Helper()
	return startArgv(t, ctx, name, netns, env, append(append(slices.Clone(wrap), pcapsyncBin), args...))
}

// startArgv runs argv (a program and its arguments: pcapsync, or a
// command that runs it) as startProcEnv does.
func startArgv(t *testing.T, ctx context.Context, name, netns string, env []string, argv []string) *proc {
	t.Helper()
	if netns != "" {
		argv = append([]string{"ip", "netns", "exec", netns}, argv...)
	}
	p := &proc{t: t, name: name, netns: netns, metrics: metricsFlag(argv), done: make(chan struct{})}
	p.cmd = exec.CommandContext(ctx, argv[0], argv[1:]...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	p.cmd.WaitDelay = 5 * time.Second
	p.cmd.Env = append(os.Environ(), env...)
	if raceBuild && os.Getenv("GORACE") == "" {
		// A race-enabled binary sleeps 1s at exit by default.
		p.cmd.Env = append(p.cmd.Env, "GORACE=atexit_sleep_ms=50")
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s (%s): %v", name, strings.Join(argv, " "), err)
	}
	go func() {
		p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			p.cmd.Process.Kill()
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				t.Errorf("%s (pid %d) did not die after SIGKILL", p.name, p.cmd.Process.Pid)
			}
		}
		if strings.Contains(p.stderr.String(), "WARNING: DATA RACE") {
			t.Errorf("%s: the race detector reported a data race (stderr below)", p.name)
		}
		if t.Failed() {
			t.Logf("%s: %s\n--- stdout:\n%s--- stderr:\n%s", p.name, strings.Join(argv, " "), p.stdout.String(), p.stderr.String())
		}
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitFor waits until the process's stderr contains substr, failing the
// test if it exits or d passes first.
func (p *proc) waitFor(substr string, d time.Duration) {
	p.t.Helper()
	if err := p.awaitStderr(substr, d); err != nil {
		p.t.Fatal(err)
	}
}

// awaitStderr is waitFor returning an error, for use off the test goroutine.
func (p *proc) awaitStderr(substr string, d time.Duration) error {
	return testutil.Poll(d, func() error {
		exited := p.exited() // before the look: what it logged before exiting counts
		switch {
		case strings.Contains(p.stderr.String(), substr):
			return nil
		case exited:
			return fmt.Errorf("%s exited (%v) before logging %q: %w", p.name, p.cmd.ProcessState, substr, testutil.ErrGiveUp)
		}
		return fmt.Errorf("%s did not log %q within %v", p.name, substr, d)
	})
}

// signal sends sig to the process.
func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("sending %v to %s: %v", sig, p.name, err)
	}
}

// wait waits up to d for the process to exit and returns its exit code
// (-1 if it was killed by a signal). If it is still running after d it is
// killed and the test fails.
func (p *proc) wait(d time.Duration) int {
	p.t.Helper()
	code, err := p.awaitExit(d)
	if err != nil {
		p.t.Fatal(err)
	}
	return code
}

// awaitExit is wait returning an error, for use off the test goroutine.
func (p *proc) awaitExit(d time.Duration) (int, error) {
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode(), nil
	case <-time.After(d):
		p.cmd.Process.Kill()
		<-p.done
		return -1, fmt.Errorf("%s did not exit within %v; killed", p.name, d)
	}
}

// stop sends SIGTERM and requires exit code 0 within d.
func (p *proc) stop(d time.Duration) {
	p.t.Helper()
	p.signal(syscall.SIGTERM)
	if code := p.wait(d); code != 0 {
		p.t.Fatalf("%s exited with code %d after SIGTERM, want 0", p.name, code)
	}
}

// startCollector starts a collector on addr writing below dir and waits
// until it listens. Without --metrics in extra it serves them on a free
// port (proc.waitMetric, proc.waitSessions).
func startCollector(t *testing.T, ctx context.Context, netns, addr, dir string, extra ...string) *proc {
	t.Helper()
	args := append([]string{"collector", "--listen", addr, "--dir", dir}, withMetrics(t, extra)...)
	p := startProc(t, ctx, "collector", netns, args...)
	p.waitReady(10 * time.Second)
	return p
}

// withMetrics adds --metrics on a free loopback port to flags that give
// none (or port 0), so that the test can scrape the process.
func withMetrics(t *testing.T, flags []string) []string {
	t.Helper()
	if metricsFlag(flags) != "" {
		return flags
	}
	for i, f := range flags {
		if f == "--metrics" || strings.HasPrefix(f, "--metrics=") { // port 0: replaced
			n := 2
			if f != "--metrics" {
				n = 1
			}
			flags = append(slices.Clone(flags[:i]), flags[min(i+n, len(flags)):]...)
			break
		}
	}
	return append(slices.Clone(flags), "--metrics", freeport.Addr(t))
}

// startReplay starts an agent that replays file to the collector at addr.
func startReplay(t *testing.T, ctx context.Context, addr, name, file string, extra ...string) *proc {
	t.Helper()
	args := append([]string{"agent", "--collector", addr, "--name", name, "--read", file}, extra...)
	return startProc(t, ctx, "agent "+name, "", args...)
}

// decodeSummary decodes a process's --summary json output, which must
// be its whole stdout: one JSON object, no key unknown to v.
func decodeSummary(p *proc, v any) error {
	out := p.stdout.String()
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: decoding its summary: %w; stdout:\n%s", p.name, err, out)
	}
	if dec.More() {
		return fmt.Errorf("%s: more than one object on stdout:\n%s", p.name, out)
	}
	return nil
}

// agentSummary is proc.summary returning an error, for use off the
// test goroutine.
func agentSummary(p *proc) (agent.Summary, error) {
	var s agent.Summary
	return s, decodeSummary(p, &s)
}

// summary returns the agent's summary, failing the test without one.
func (p *proc) summary() agent.Summary {
	p.t.Helper()
	s, err := agentSummary(p)
	if err != nil {
		p.t.Fatal(err)
	}
	return s
}

// finishReplay waits for a replaying agent to exit 0 and checks that its
// summary shows want packets read, sent and acknowledged and none lost.
func finishReplay(t *testing.T, p *proc, want uint64, d time.Duration) agent.Summary {
	t.Helper()
	if code := p.wait(d); code != 0 {
		t.Fatalf("%s exited with code %d, want 0", p.name, code)
	}
	s := p.summary()
	if s.Read != want || s.Sent != want || s.Acked != want || s.Dropped != 0 || s.Unacked != 0 {
		t.Errorf("%s summary %+v: want read = sent = acknowledged = %d, nothing dropped or unacknowledged", p.name, s, want)
	}
	return s
}

// expectNoReconnects requires that an agent whose collector ran
// throughout needed a single connection.
func expectNoReconnects(t *testing.T, p *proc, s agent.Summary) {
	t.Helper()
	if s.Reconnects != 0 {
		t.Errorf("%s reconnected %d times although the collector ran throughout (see its warnings)", p.name, s.Reconnects)
	}
}

// collectorSummary is the collector's --summary json object, with the
// tests' helpers.
type collectorSummary struct{ serve.Summary }

// collectorSummary returns the collector's summary, failing the test
// without one, and failing it (going on) if batches were lost: every
// e2e test's agents resend what was not acknowledged, so a gap in a
// sequence is a bug wherever it shows.
func (p *proc) collectorSummary() collectorSummary {
	p.t.Helper()
	var s collectorSummary
	if err := decodeSummary(p, &s); err != nil {
		p.t.Fatal(err)
	}
	if s.MissingBatches > 0 {
		p.t.Errorf("%s reports %d lost batches:\n%s", p.name, s.MissingBatches, p.stdout.String())
	}
	return s
}

// udpAgent returns the UDP counts of agent name in s, failing the test
// if s has none.
func (s collectorSummary) udpAgent(t *testing.T, name string) collector.UDPAgentSummary {
	t.Helper()
	if s.UDP != nil {
		for _, a := range s.UDP.Agents {
			if a.Name == name {
				return a
			}
		}
	}
	t.Fatalf("the collector's summary has no UDP counts for agent %s: %+v", name, s.UDP)
	return collector.UDPAgentSummary{}
}

// besideFile reports whether name is a file the store writes beside a
// capture file: its index (index.IsIndex) or its flow records (flow.Suffix).
func besideFile(name string) bool {
	return index.IsIndex(name) || strings.HasSuffix(strings.TrimSuffix(name, ".part"), flow.Suffix)
}

// dirEntries returns the names in dir, sorted, but for the indexes and
// flow files beside capture files (besideFile): what a reader of
// captures sees.
func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("reading %s: %v", dir, err)
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		if !besideFile(e.Name()) {
			names = append(names, e.Name())
		}
	}
	return names
}

// agentDirs returns the agent directories in a collector's output
// directory, sorted. The collector's own state file (store.StateFile),
// disk reserve (store.ReserveFile), owner lock (store.OwnerFile) and retention index (store.RetainDir)
// are allowed beside them; anything else that is not a directory is a
// test error.
func agentDirs(t *testing.T, dir string) []string {
	t.Helper()
	var names []string
	for _, name := range dirEntries(t, dir) {
		fi, err := os.Lstat(filepath.Join(dir, name))
		switch {
		case err != nil:
			t.Errorf("%s: %v", dir, err)
		case (name == store.StateFile || name == store.ReserveFile || name == store.OwnerFile) && fi.Mode().IsRegular():
		case name == store.RetainDir && fi.IsDir():
		case !fi.IsDir():
			t.Errorf("%s: unexpected %v %q in the collector's directory", dir, fi.Mode().Type(), name)
		default:
			names = append(names, name)
		}
	}
	return names
}

// treeSize returns the total size of the regular files below dir (0 if
// it does not exist yet).
func treeSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// waitNoPart waits up to d until no ".part" file is left below dir.
func waitNoPart(t *testing.T, dir string, d time.Duration) {
	t.Helper()
	testutil.Eventually(t, d, func() error {
		if parts, _ := filepath.Glob(filepath.Join(dir, "*", "*.part")); len(parts) > 0 {
			return fmt.Errorf("files still open after the agents said goodbye: %v", parts)
		}
		return nil
	})
}
