package store

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/layout"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// crashAfter writes batches 1..n of 10 packets and commits them, then
// "crashes": the Store is dropped without End or Close, leaving the file
// as a .part. It returns the .part path.
func crashAfter(t *testing.T, dir string, n int, fm fileMode) string {
	t.Helper()
	c := newCore(t, fm.config(Config{Dir: dir}))
	s, _, err := c.Begin(hello("crash", 5), func() {})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := s.Batch(0, batchPayload(uint64(i+1), i*10, 10)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	parts, _ := filepath.Glob(filepath.Join(dir, "crash", "*"+layout.PartSuffix))
	if len(parts) != 1 {
		t.Fatalf("%d .part files, want 1", len(parts))
	}
	// Batches written but never committed: their bytes reach the file
	// (the compressor emits what fills its buffers), acknowledged they
	// are not. Random data, so a compressor emits a lot of it.
	af := &c.writers["crash"].file
	for i := range 3 {
		if _, err := s.Batch(0, randomBatch(uint64(n+1+i), 200)); err != nil {
			t.Fatal(err)
		}
	}
	af.bw.Flush()
	af.f.Close() // the process is gone
	c.die()
	return parts[0]
}

// randomBatch is a batch of n incompressible 1000-byte packets.
func randomBatch(seq uint64, n int) []byte {
	var e wire.BatchEncoder
	e.Reset(nil)
	data := make([]byte, 1000)
	for i := range n {
		rand.Read(data)
		e.Append(int64(1_700_000_000_000_000_000+i), 0, 1000, data)
	}
	return e.Finish(seq)[wire.HeaderSize:]
}

func TestRepairAfterCrash(t *testing.T) {
	for _, fm := range fileModes {
		t.Run(fm.name(), func(t *testing.T) { testRepairAfterCrash(t, fm) })
	}
}

func testRepairAfterCrash(t *testing.T, fm fileMode) {
	tests := []struct {
		name string
		tail func(t *testing.T, part string)
	}{
		{"clean end", func(*testing.T, string) {}},
		{"torn block", func(t *testing.T, part string) {
			appendBytes(t, part, []byte{6, 0, 0, 0, 0x80, 0, 0, 0, 1, 2, 3}) // an EPB header claiming 128 bytes, cut
		}},
		{"packets without their mark", func(t *testing.T, part string) {
			// A complete EPB (4 data bytes) of a batch whose mark never
			// made it to the file: it must be cut as well.
			epb := make([]byte, 36)
			binary.LittleEndian.PutUint32(epb[0:], 6)
			binary.LittleEndian.PutUint32(epb[4:], 36)
			binary.LittleEndian.PutUint32(epb[20:], 4)
			binary.LittleEndian.PutUint32(epb[24:], 4)
			binary.LittleEndian.PutUint32(epb[32:], 36)
			appendBytes(t, part, epb)
		}},
		{"garbage", func(t *testing.T, part string) { appendBytes(t, part, []byte("garbage garbage garbage!")) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			part := crashAfter(t, dir, 3, fm)
			tt.tail(t, part)
			c := newCore(t, fm.config(Config{Dir: dir})) // repairs on start
			if _, err := os.Stat(part); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf(".part still there: %v", err)
			}
			// The 3 committed batches of 10 packets are kept; of the 3
			// uncommitted ones of 200, those whole in the file with their
			// mark may be kept too, and then count as written.
			pkts, files := readDir(t, filepath.Join(dir, "crash"))
			held := (len(pkts) - 30) / 200
			if files != 1 || len(pkts) < 30 || (len(pkts)-30)%200 != 0 {
				t.Fatalf("%d files, %d packets after repair; want 1 file, 30 + a multiple of 200 packets", files, len(pkts))
			}
			t.Logf("%d uncommitted batches were whole and kept", held)
			s, w, err := c.Begin(hello("crash", 5), func() {})
			if err != nil || w.LastSeq != uint64(3+held) {
				t.Fatalf("after repair LastSeq %d (%v), want %d from the file's marks", w.LastSeq, err, 3+held)
			}
			if dup, _ := s.Batch(0, batchPayload(3, 20, 10)); !dup {
				t.Fatal("batch 3 accepted again after repair")
			}
			checkTshark(t, strings.TrimSuffix(part, layout.PartSuffix))
		})
	}
}

// TestRepairUnacknowledged: a batch written whole with its mark but not
// yet acknowledged is kept and counted as held (the agent is told not to
// resend it); a file whose only batch lost its mark is removed.
func TestRepairUnacknowledged(t *testing.T) {
	for _, cutMark := range []bool{false, true} {
		dir := t.TempDir()
		c := newCore(t, Config{Dir: dir})
		s, _, _ := c.Begin(hello("nomark", 1), func() {})
		s.Batch(0, batchPayload(1, 0, 10)) // written, never committed
		af := &c.writers["nomark"].file
		af.bw.Flush()
		if cutMark {
			af.f.Truncate(af.w.Written() - (4 + 4 + layout.MarkSize + 4 + 4)) // mark option, end of options, trailer: a torn last block
		}
		af.f.Close()
		c.die()
		c2 := newCore(t, Config{Dir: dir})
		ents, _ := os.ReadDir(filepath.Join(dir, "nomark"))
		_, w, _ := c2.Begin(hello("nomark", 1), func() {})
		if cutMark && (len(ents) != 0 || w.LastSeq != 0) {
			t.Fatalf("mark cut: %d files left, LastSeq %d; want none, 0", len(ents), w.LastSeq)
		}
		if !cutMark {
			if pkts, _ := readDir(t, filepath.Join(dir, "nomark")); len(pkts) != 10 || w.LastSeq != 1 {
				t.Fatalf("whole batch: %d packets, LastSeq %d; want 10, 1", len(pkts), w.LastSeq)
			}
		}
	}
}

// readParts reads every packet of every file in dir, finished or not.
func readParts(t *testing.T, dir string) []readPacket {
	t.Helper()
	tmp := t.TempDir()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(tmp, strings.TrimSuffix(e.Name(), layout.PartSuffix)), b, 0o600)
	}
	pkts, _ := readDir(t, tmp)
	return pkts
}

func appendBytes(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(b)
	f.Close()
}

func checkTshark(t *testing.T, path string) {
	t.Helper()
	if _, err := exec.LookPath("capinfos"); err != nil {
		t.Log("capinfos not installed; skipping its check")
		return
	}
	out, err := exec.Command("capinfos", path).CombinedOutput()
	if err != nil || strings.Contains(string(out), "corrupt") || strings.Contains(string(out), "cut short") {
		t.Fatalf("capinfos %s: %v\n%s", path, err, out)
	}
	if strings.HasSuffix(path, ".zst") {
		checkZstdCLI(t, path, -1) // capinfos 4.0 reads the first frame only
	}
}

// TestDiskFull fills a small tmpfs: the failing batch is not
// acknowledged, the file keeps exactly the acknowledged batches and
// stays readable, and writing resumes once space returns.
func TestDiskFull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	for _, fm := range fileModes {
		t.Run(fm.name(), func(t *testing.T) { testDiskFull(t, fm) })
	}
}

func testDiskFull(t *testing.T, fm fileMode) {
	dir := mountTmpfs(t, 8<<20)
	c := newCore(t, fm.config(Config{Dir: dir, Fsync: FsyncPerBatch}))
	// Started with room (Open refuses a full disk): now fill it up.
	filler := filepath.Join(dir, "filler")
	fill(t, filler, 32<<10)
	s, _, err := c.Begin(hello("full", 3), func() {})
	if err != nil {
		t.Fatal(err)
	}
	var acked uint64
	var failed error
	for seq := uint64(1); seq < 20000 && failed == nil; seq++ {
		if _, failed = s.Batch(0, batchPayload(seq, int(seq)*10, 10)); failed == nil {
			acked, failed = s.Commit()
		}
	}
	if !errors.Is(failed, syscall.ENOSPC) {
		t.Fatalf("err = %v, want ENOSPC", failed)
	}
	if got, _ := s.Commit(); got != acked {
		t.Fatalf("after the failure Commit acknowledges %d, acknowledged before: %d", got, acked)
	}
	s.End(false)
	// While the disk is full the state cannot be saved, so the cut-back
	// file may keep its .part suffix; it is readable and exact either way.
	pkts := readParts(t, filepath.Join(dir, "full"))
	if uint64(len(pkts)) != acked*10 {
		t.Fatalf("file holds %d packets, %d batches were acknowledged", len(pkts), acked)
	}
	os.Remove(filler)
	c.tick(time.Now()) // space is back: the retry publishes it
	if parts, _ := filepath.Glob(filepath.Join(dir, "full", "*"+layout.PartSuffix)); len(parts) != 0 {
		t.Fatalf("%d files still unpublished after space returned", len(parts))
	}
	files, _ := filepath.Glob(filepath.Join(dir, "full", "*"))
	for _, f := range files {
		checkTshark(t, f) // the cut-back file is a complete stream
	}
	s2, w, err := c.Begin(hello("full", 3), func() {})
	if err != nil || w.LastSeq != acked {
		t.Fatalf("reconnect: LastSeq %d (%v), want %d", w.LastSeq, err, acked)
	}
	if _, err := s2.Batch(0, batchPayload(acked+1, 0, 10)); err != nil {
		t.Fatalf("after space returned: %v", err)
	}
	if got, err := s2.Commit(); err != nil || got != acked+1 {
		t.Fatalf("Commit = %d, %v; want %d", got, err, acked+1)
	}
	s2.End(true)
	c.Close()
}

// fill writes a file at path that leaves about free bytes free on its
// file system.
func fill(t *testing.T, path string, free int64) {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(filepath.Dir(path), &st); err != nil {
		t.Fatal(err)
	}
	n := int64(st.Bavail)*int64(st.Bsize) - free
	if n <= 0 {
		return
	}
	if err := os.WriteFile(path, make([]byte, n), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestRepairLargeDBusPacket: a D-Bus batch (link type 231) ending in a
// 300 000-byte packet, committed, survives a crash and repair.
func TestRepairLargeDBusPacket(t *testing.T) {
	for _, fm := range fileModes {
		t.Run(fm.name(), func(t *testing.T) {
			dir := t.TempDir()
			h := &wire.Hello{Instance: [16]byte{9}, Name: "dbus", Host: "h1",
				Interfaces: []wire.Interface{{Name: "system", LinkType: 231, SnapLen: 1 << 27}}}
			c := newCore(t, fm.config(Config{Dir: dir}))
			s, _, err := c.Begin(h, func() {})
			if err != nil {
				t.Fatal(err)
			}
			var e wire.BatchEncoder
			e.Reset(nil)
			e.Append(1, 0, 100, make([]byte, 100))
			e.Append(2, 0, 300_000, make([]byte, 300_000))
			if _, err := s.Batch(0, e.Finish(1)[wire.HeaderSize:]); err != nil {
				t.Fatal(err)
			}
			if seq, err := s.Commit(); seq != 1 || err != nil {
				t.Fatalf("Commit = %d, %v", seq, err)
			}
			c.writers["dbus"].file.f.Close() // the process is gone
			c.die()
			parts := partFiles(filepath.Join(dir, "dbus"))

			c2 := newCore(t, fm.config(Config{Dir: dir}))
			if _, w, err := c2.Begin(h, func() {}); err != nil || w.LastSeq != 1 {
				t.Fatalf("after repair LastSeq %d (%v), want 1", w.LastSeq, err)
			}
			if len(parts) != 1 {
				t.Fatalf("%d unfinished files", len(parts))
			}
			lens := countPackets(t, strings.TrimSuffix(parts[0], layout.PartSuffix))
			if len(lens) != 2 || lens[1] != 300_000 {
				t.Fatalf("packets after repair: %v, want 100 and 300000 bytes", lens)
			}
		})
	}
}

// TestRepairZstdNearlyFull: a zstd file ten times larger than the free
// space left is repaired (in place).
func TestRepairZstdNearlyFull(t *testing.T) {
	dir := mountTmpfs(t, 48<<20)
	fc := compress.Spec{Codec: compress.Zstd}
	c := newCore(t, Config{Dir: dir, FileCompress: fc, Fsync: FsyncNever})
	s, _, err := c.Begin(hello("full", 4), func() {})
	if err != nil {
		t.Fatal(err)
	}
	const batches = 100 // 20 MB of random packets
	for b := range batches {
		if _, err := s.Batch(0, randomBatch(uint64(b+1), 200)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	for b := range 3 { // written, never acknowledged, the last one torn
		s.Batch(0, randomBatch(uint64(batches+1+b), 200))
	}
	af := &c.writers["full"].file
	af.bw.Flush()
	af.f.Close() // the process is gone
	c.die()
	fill(t, filepath.Join(dir, "filler"), 2<<20)

	c2 := newCore(t, Config{Dir: dir, FileCompress: fc})
	_, w, err := c2.Begin(hello("full", 4), func() {})
	if err != nil || w.LastSeq < batches {
		t.Fatalf("after repair LastSeq %d (%v), want at least %d", w.LastSeq, err, batches)
	}
	if pkts := readParts(t, filepath.Join(dir, "full")); len(pkts) != int(w.LastSeq)*200 {
		t.Fatalf("%d packets after repair, LastSeq %d", len(pkts), w.LastSeq)
	}
	if parts, _ := filepath.Glob(filepath.Join(dir, "full", "*"+layout.PartSuffix)); len(parts) != 0 {
		t.Fatalf("still unfinished: %v", parts)
	}
}

// TestRepairFailureKeepsMarks: a repair that cannot finish leaves the
// file unfinished, for the next start, and the batches it found still
// count: saved in the state file, welcomed with the right LastSeq, no
// batch written twice, none reported missing.
func TestRepairFailureKeepsMarks(t *testing.T) {
	for _, fm := range fileModes {
		t.Run(fm.name(), func(t *testing.T) {
			dir := t.TempDir()
			part := crashAfter(t, dir, 3, fm)
			testRepairFault = func(string) error { return errors.New("injected") }
			t.Cleanup(func() { testRepairFault = nil })
			c := newCore(t, fm.config(Config{Dir: dir}))
			if _, err := os.Stat(part); err != nil {
				t.Fatalf("the unfinished file is gone after a failed repair: %v", err)
			}
			var doc stateDoc
			b, _ := os.ReadFile(filepath.Join(dir, StateFile))
			if err := json.Unmarshal(b, &doc); err != nil || len(doc.Instances) != 1 || doc.Instances[0].LastSeq < 3 {
				t.Fatalf("state file after a failed repair: %s (%v); want the instance at 3 or more", b, err)
			}
			held := doc.Instances[0].LastSeq
			s, w, err := c.Begin(hello("crash", 5), func() {})
			if err != nil || w.LastSeq != held {
				t.Fatalf("LastSeq %d (%v), want %d", w.LastSeq, err, held)
			}
			if dup, _ := s.Batch(0, batchPayload(3, 20, 10)); !dup {
				t.Fatal("batch 3 written again")
			}
			if dup, err := s.Batch(0, batchPayload(held+1, 1000, 10)); dup || err != nil {
				t.Fatalf("next batch: dup %v, %v", dup, err)
			}
			s.Commit()
			s.End(true)
			if m := c.missing; m != 0 {
				t.Fatalf("%d batches reported missing", m)
			}
			c.Close()

			testRepairFault = nil
			c2 := newCore(t, fm.config(Config{Dir: dir}))
			if _, w, err := c2.Begin(hello("crash", 5), func() {}); err != nil || w.LastSeq != held+1 {
				t.Fatalf("after the retried repair LastSeq %d (%v), want %d", w.LastSeq, err, held+1)
			}
			// Batches 1-3 of 10 packets, the unacknowledged ones of 200 the
			// crash left whole, and the one written since, of 10.
			want := 30 + int(held-3)*200 + 10
			if pkts, _ := readDir(t, filepath.Join(dir, "crash")); len(pkts) != want {
				t.Fatalf("%d packets, want %d", len(pkts), want)
			}
		})
	}
}

// TestRepairInBackground: while an agent's files are repaired, its
// Begin is refused with ErrBusy (its agent retries) and other agents are
// served; once done, it is welcomed with the marks its files hold.
func TestRepairInBackground(t *testing.T) {
	dir := t.TempDir()
	crashAfter(t, dir, 3, fileMode{})
	release := make(chan struct{})
	testRepairStart = func(agent string) {
		if agent == "crash" {
			<-release
		}
	}
	t.Cleanup(func() { testRepairStart = nil })
	c, err := openCore(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before Close, which waits for the repair
	if _, _, err := c.Begin(hello("crash", 5), func() {}); !errors.Is(err, ErrBusy) {
		t.Fatalf("Begin during its repair: %v, want ErrBusy", err)
	}
	s, w, err := c.Begin(hello("other", 6), func() {})
	if err != nil || w.LastSeq != 0 {
		t.Fatalf("another agent during the repair: %v", err)
	}
	if _, err := s.Batch(0, batchPayload(1, 0, 10)); err != nil {
		t.Fatal(err)
	}
	if seq, err := s.Commit(); seq != 1 || err != nil {
		t.Fatalf("another agent's Commit = %d, %v", seq, err)
	}
	s.End(true)
	unblock()
	var last uint64
	testutil.Eventually(t, 5*time.Second, func() error {
		s, w, err := c.Begin(hello("crash", 5), func() {})
		if err == nil {
			last = w.LastSeq
			s.End(true)
		}
		return err
	})
	if last < 3 {
		t.Fatalf("after the repair LastSeq %d, want 3 or more", last)
	}
}

// TestCloseDuringRepair: Close lets a running repair finish within
// ShutdownTimeout; the next start finds the marks.
func TestCloseDuringRepair(t *testing.T) {
	dir := t.TempDir()
	crashAfter(t, dir, 3, fileMode{fc: compress.Spec{Codec: compress.Zstd}})
	release := make(chan struct{})
	testRepairStart = func(string) { <-release }
	t.Cleanup(func() { testRepairStart = nil })
	c, err := openCore(Config{Dir: dir, FileCompress: compress.Spec{Codec: compress.Zstd}})
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	close(release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	// Within ShutdownTimeout, Close let the repair finish.
	if parts, _ := filepath.Glob(filepath.Join(dir, "crash", "*"+layout.PartSuffix)); len(parts) != 0 {
		t.Fatalf("unfinished files after Close: %v", parts)
	}
	testRepairStart = nil
	c2 := newCore(t, Config{Dir: dir, FileCompress: compress.Spec{Codec: compress.Zstd}})
	if _, w, err := c2.Begin(hello("crash", 5), func() {}); err != nil || w.LastSeq < 3 {
		t.Fatalf("LastSeq %d (%v), want 3 or more", w.LastSeq, err)
	}
}
