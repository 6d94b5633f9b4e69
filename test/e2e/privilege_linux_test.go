//go:build linux

package e2e

import (
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/privilege"
	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
)

// The least-privilege tests run the agent and the collector as the user
// nobody, holding exactly the capabilities setpriv(1) grants them, or
// start the agent as root with --user nobody; in the veth namespaces.

// asNobody is setpriv's command line that runs a program as nobody, with
// no supplementary group, holding caps ("+net_raw", ...; "" for none)
// as its permitted, effective and ambient capabilities.
func asNobody(caps string) []string {
	args := []string{"setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"}
	if caps == "" {
		return append(args, "--inh-caps=-all")
	}
	return append(args, "--inh-caps="+caps, "--ambient-caps="+caps)
}

// nobodyDir returns a fresh output directory that nobody owns, below a
// directory it may enter, and makes the binary under test runnable by
// nobody.
func nobodyDir(t *testing.T) string {
	t.Helper()
	requireTools(t, "setpriv")
	u, err := privilege.Lookup("nobody")
	if err != nil {
		missing(t, "needs the user nobody: %v", err)
	}
	if err := os.Chmod(filepath.Dir(pcapsyncBin), 0o755); err != nil {
		t.Fatal(err)
	}
	parent, err := os.MkdirTemp("", "pcapsync-e2e-priv-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	if err := os.Chmod(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(parent, "out")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, u.UID, u.GID); err != nil {
		t.Fatal(err)
	}
	return dir
}

// privCapture runs a collector as nobody without capabilities and the
// agent as agentWrap and agentExtra say, in namespace A of vn; sends
// count datagrams the agent's filter selects; and checks that the
// collector wrote each exactly once. check, if set, runs once the agent
// is connected, before the traffic.
func privCapture(t *testing.T, vn *vethNet, dir string, agentWrap []string, agentExtra []string, check func(*proc)) {
	t.Helper()
	ctx := testContext(t)
	const port, count = 5555, 300
	udpSink(t, vn.A, netip.AddrPortFrom(vn.addrA, port))
	addr := freeport.Addr(t)
	coll := startProcAs(t, ctx, "collector", vn.A, asNobody(""), nil,
		withSummaryJSON(withInsecure([]string{"collector", "--listen", addr, "--dir", dir, "--metrics", freeport.Addr(t)}))...)
	coll.waitReady(10 * time.Second)
	args := append([]string{"agent", "--collector", addr, "--name", "priv1", "--iface", "vA",
		"--filter", fmt.Sprintf("udp and dst port %d", port)}, agentExtra...)
	ag := startProcAs(t, ctx, "agent priv1", vn.A, agentWrap, nil, withSummaryJSON(withInsecure(args))...)
	coll.waitSessions(1, 15*time.Second)
	if check != nil {
		check(ag)
	}
	g := startProc(t, ctx, "gen", vn.B, "gen", "udp", "--to", fmt.Sprintf("%s:%d", vn.addrA, port),
		"--count", fmt.Sprint(count), "--rate", "2000", "--stream", "1")
	if code := g.wait(20 * time.Second); code != 0 {
		t.Fatalf("gen exited with code %d", code)
	}
	ag.stop(20 * time.Second)
	if s := ag.summary(); s.Read != count || s.Acked != count || s.Dropped != 0 || s.KernelDrops != 0 {
		t.Errorf("agent summary %+v: want %d read and acknowledged, nothing dropped", s, count)
	}
	coll.stop(20 * time.Second)
	r := checkAgentDir(t, filepath.Join(dir, "priv1"))
	r.expectExactlyOnce(t, "priv1", map[uint32]uint64{1: count})
}

// TestUnprivilegedCapture: an agent running as nobody with CAP_NET_RAW
// alone (no CAP_NET_ADMIN: promiscuous mode needs none) captures live
// to a collector running as nobody with no capability at all.
func TestUnprivilegedCapture(t *testing.T) {
	requireTools(t, checkTools...)
	vn := newVethNet(t)
	dir := nobodyDir(t)
	privCapture(t, vn, dir, asNobody("+net_raw"), nil, func(ag *proc) {
		creds := threadCreds(t, ag)
		if c := creds[0]; c.UID != 65534 || c.Effective != privilege.SetOf(privilege.NetRaw) {
			t.Errorf("agent runs as %v, want uid 65534 with CAP_NET_RAW alone", c)
		}
	})
}

// TestCaptureWithoutCapability: an agent running as nobody without
// CAP_NET_RAW refuses at once, saying what it lacks and how to grant it.
func TestCaptureWithoutCapability(t *testing.T) {
	vn := newVethNet(t)
	nobodyDir(t)
	ctx := testContext(t)
	for _, caps := range []string{"", "+net_admin"} {
		ag := startProcAs(t, ctx, "agent "+caps, vn.A, asNobody(caps), nil,
			withInsecure([]string{"agent", "--collector", "127.0.0.1:1", "--iface", "vA"})...)
		code := ag.wait(10 * time.Second)
		stderr := ag.stderr.String()
		if code == 0 {
			t.Errorf("caps %q: agent exited 0, want a failure; stderr:\n%s", caps, stderr)
		}
		for _, want := range []string{`capturing on "vA" needs CAP_NET_RAW`, "run as root, or grant it: setcap cap_net_raw+ep ", "AmbientCapabilities=CAP_NET_RAW"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("caps %q: stderr lacks %q:\n%s", caps, want, stderr)
			}
		}
	}
}

// TestAgentUser: an agent started as root with --user nobody (-Z) and a
// spool opens its capture, then runs as nobody on every thread with no
// capability left, not even in its bounding set, and captures.
func TestAgentUser(t *testing.T) {
	requireTools(t, checkTools...)
	vn := newVethNet(t)
	dir := nobodyDir(t)
	for _, flag := range []string{"--user", "-Z"} {
		t.Run(flag, func(t *testing.T) {
			// Created by the agent, as root, where nobody may reach it.
			spool := filepath.Join(filepath.Dir(dir), "spool"+flag)
			os.RemoveAll(filepath.Join(dir, "priv1"))
			privCapture(t, vn, dir, nil, []string{flag, "nobody", "--spool", spool}, func(ag *proc) {
				waitUID(t, ag, 65534, 5*time.Second)
				for i, c := range threadCreds(t, ag) {
					if c.UID != 65534 || c.EUID != 65534 || c.Effective != 0 || c.Permitted != 0 || c.Bounding != 0 ||
						c.Ambient != 0 || c.Inheritable != 0 || !c.NoNewPrivs || len(c.Groups) != 1 {
						t.Errorf("agent thread %d runs as %v, want uid 65534, nobody's group, no capability, no_new_privs", i, c)
					}
				}
			})
			fi, err := os.Stat(spool)
			if err != nil {
				t.Fatal(err)
			}
			if st := fi.Sys().(*syscall.Stat_t); st.Uid != 65534 {
				t.Errorf("spool owned by uid %d, want nobody (65534)", st.Uid)
			}
		})
	}
}

// threadCreds returns the credentials of every thread of p, failing the
// test when it cannot read them.
// waitUID waits up to d until every thread of p runs as uid (its
// privileges dropped).
func waitUID(t *testing.T, p *proc, uid int, d time.Duration) {
	t.Helper()
	testutil.Eventually(t, d, func() error {
		cs, err := privilege.Read(p.cmd.Process.Pid)
		if err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		for i, c := range cs {
			if c.UID != uid || c.EUID != uid {
				return fmt.Errorf("%s: thread %d runs as uid %d, euid %d; want %d", p.name, i, c.UID, c.EUID, uid)
			}
		}
		return nil
	})
}

func threadCreds(t *testing.T, p *proc) []privilege.Creds {
	t.Helper()
	cs, err := privilege.Read(p.cmd.Process.Pid)
	if err != nil {
		t.Fatalf("%s: %v", p.name, err)
	}
	// The process is pcapsync itself: ip netns exec and setpriv exec it.
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.cmd.Process.Pid)); err != nil || exe != pcapsyncBin {
		t.Fatalf("%s: pid %d runs %q (%v), want %s", p.name, p.cmd.Process.Pid, exe, err, pcapsyncBin)
	}
	return cs
}

// TestCollectorUser: a collector started as root with --user nobody
// binds its port, makes its missing output root for nobody, switches
// and writes every file as nobody, holding no capability; an output
// root nobody may not write is refused at start with the reason.
func TestCollectorUser(t *testing.T) {
	requireTools(t, checkTools...)
	parent := filepath.Dir(nobodyDir(t))
	ctx := testContext(t)
	in := filepath.Join(parent, "in.pcap")
	const count = 2000
	writeGenFile(t, in, genConfig(count, 71))
	dir := filepath.Join(parent, "made", "out") // missing: made by the collector
	addr := freeport.Addr(t)
	coll := startCollector(t, ctx, "", addr, dir, "--user", "nobody", "--rotate-size", "1M")
	waitUID(t, coll, 65534, 5*time.Second)
	for i, c := range threadCreds(t, coll) {
		if c.UID != 65534 || c.EUID != 65534 || c.Effective != 0 || c.Permitted != 0 || c.Bounding != 0 || !c.NoNewPrivs {
			t.Errorf("collector thread %d runs as %v, want uid 65534, no capability, no_new_privs", i, c)
		}
	}
	finishReplay(t, startReplay(t, ctx, addr, "user1", in), count, 30*time.Second)
	coll.stop(20 * time.Second)
	checkAgentDir(t, filepath.Join(dir, "user1")).expectExactlyOnce(t, "user1", map[uint32]uint64{71: count})
	files := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 65534 {
			t.Errorf("%s owned by uid %d, want nobody (65534)", path, st.Uid)
		}
		files++
		return nil
	})
	if err != nil || files < 4 {
		t.Fatalf("walking %s: %v (%d entries)", dir, err, files)
	}

	// A root-only output root: refused, saying what to do.
	closed := filepath.Join(parent, "rootonly")
	if err := os.Mkdir(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	p := startProc(t, ctx, "collector rootonly", "", "collector", "--listen", freeport.Addr(t),
		"--dir", closed, "--user", "nobody")
	if code := p.wait(20 * time.Second); code == 0 {
		t.Fatal("a collector whose user cannot write --dir exited 0")
	}
	if want := "is not writable by the user"; !strings.Contains(p.stderr.String(), want) {
		t.Errorf("the refusal does not say %q:\n%s", want, p.stderr.String())
	}
}

// TestRetentionIndexGroupReadable: a collector writes retention's index
// of file times (store.RetainDir) 0640, like the data files, so that an
// analyst in the root's group queries with it; an index the analyst
// cannot read (0600, as collectors before wrote it) makes the query warn,
// once, instead of reading every file silently.
func TestRetentionIndexGroupReadable(t *testing.T) {
	requireTools(t, checkTools...)
	ctx := testContext(t)
	dir := nobodyDir(t) // a parent nobody may enter, the binary runnable by nobody
	src := filepath.Join(t.TempDir(), "in.pcap")
	writeGenFile(t, src, gen.FileConfig{Count: 20_000, Mix: gen.MixIMIX, Stream: 90, Seed: 90})
	addr := freeport.Addr(t)
	old := syscall.Umask(0o022)
	coll := startCollector(t, ctx, "", addr, dir, "--rotate-size", "1M")
	syscall.Umask(old)
	finishReplay(t, startReplay(t, ctx, addr, "grp", src), 20_000, 60*time.Second)
	coll.stop(20 * time.Second)

	index := filepath.Join(dir, store.RetainDir, "grp.json")
	if fi, err := os.Stat(index); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("retention's index %s: %v, mode %v; want 0640 like the data files", index, err, fi.Mode())
	}
	// The analyst: nobody, in group nogroup, which owns the root; root
	// owns the files.
	nobody, err := privilege.Lookup("nobody")
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, 0, nobody.GID)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	query := func() string {
		t.Helper()
		p := startProcAs(t, ctx, "query as the analyst", "", asNobody(""), nil, "query", "--dir", dir, "-w", "-")
		if code := p.wait(60 * time.Second); code != 0 {
			t.Fatalf("query exited with %d:\n%s", code, p.stderr.String())
		}
		return p.stderr.String()
	}
	const warning = "retention's index of file times cannot be read"
	if log := query(); strings.Contains(log, warning) {
		t.Errorf("the group's query cannot read the index:\n%s", log)
	}
	if err := os.Chmod(index, 0o600); err != nil {
		t.Fatal(err)
	}
	if log := query(); strings.Count(log, warning) != 1 {
		t.Errorf("an index the query cannot read: want one warning, got:\n%s", log)
	}
}
