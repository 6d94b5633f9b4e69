package collector

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pcapsync/pcapsync/internal/store"
)

// TestLinkedAgentDirRefused: an agent whose directory below the root is
// a symbolic link (DIR/evil -> elsewhere) is refused at its hello with a
// reason and counted; nothing is written through the link, so nothing
// is acknowledged that is not in the root. Other agents are served.
func TestLinkedAgentDirRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	outside := t.TempDir()
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "evil")); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, Config{Insecure: true, Store: store.Config{Dir: dir}})
	evil := dial(t, ts.addr, nil, "evil", "")
	welcome, reason, err := evil.reply()
	if welcome || err != nil || !strings.Contains(reason, "link") {
		t.Fatalf("agent with a linked directory: welcome %v, reject reason %q, err %v; want a Reject naming the link", welcome, reason, err)
	}
	ts.waitRejected(t, 1, store.ErrAgentDir.Error())
	if n := ts.core.Store().Counters.AgentDirRefused.Load(); n == 0 {
		t.Error("refusal not counted (Counters.AgentDirRefused)")
	}
	good := dial(t, ts.addr, nil, "good", "")
	if welcome, reason, err := good.reply(); !welcome {
		t.Fatalf("another agent: reject %q, %v", reason, err)
	}
	good.deliver(t, 3)
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("%d files written through the link outside the root: %v", len(ents), ents[0].Name())
	}
}
