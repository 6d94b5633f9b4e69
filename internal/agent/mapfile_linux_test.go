package agent

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/wire"
	"golang.org/x/sys/unix"
)

// replayQueued makes an agent replaying path (New opens it) and runs
// its source into the agent's queue with no sender (no read-ahead
// bound), cut (if not nil) called between the two, then returns the
// mapping (nil: read), run's error and every packet of the batches
// queued, in order.
func replayQueued(t *testing.T, path string, cut func()) (m *mapping, packets []pcapfile.Packet, err error) {
	t.Helper()
	a, err := New(Config{Collectors: []string{"127.0.0.1:1"}, Name: "m", ReadFile: path, Insecure: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	a.q.ahead = 0
	s := a.sources[0].(*fileSource) // New opened it
	m = s.m
	if cut != nil {
		cut()
	}
	err = s.run()
	for seq := uint64(1); ; seq++ {
		b := a.q.at(seq)
		if b == nil {
			break
		}
		h, herr := wire.ParseHeader((*[wire.HeaderSize]byte)(b.buf), wire.Limits{})
		if herr != nil || int(h.Length) != len(b.buf)-wire.HeaderSize {
			t.Fatalf("batch %d: header %+v, %v; %d bytes", seq, h, herr, len(b.buf))
		}
		bt, perr := wire.ParseBatch(h.Flags, b.buf[wire.HeaderSize:], wire.BatchLimits{})
		if perr == nil {
			perr = bt.Validate(1)
		}
		if perr != nil {
			t.Fatalf("batch %d: %v", seq, perr)
		}
		it := bt.Iter(1)
		var r wire.Record
		for it.Next(&r) == nil {
			packets = append(packets, pcapfile.Packet{Timestamp: r.Timestamp, OrigLen: r.OrigLen, Data: bytes.Clone(r.Data)})
		}
	}
	return m, packets, err
}

// readAll is every packet of a capture file, read with read(2).
func readAll(t *testing.T, data []byte) []pcapfile.Packet {
	t.Helper()
	r, err := pcapfile.NewReader(bytes.NewReader(data), nil)
	if err != nil {
		t.Fatal(err)
	}
	var ps []pcapfile.Packet
	for {
		p, err := r.ReadPacket()
		if err == io.EOF {
			return ps
		}
		if err != nil {
			t.Fatal(err)
		}
		p.Data = bytes.Clone(p.Data)
		ps = append(ps, p)
	}
}

func sameAsFile(t *testing.T, got, want []pcapfile.Packet) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d packets, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i].Timestamp != want[i].Timestamp || got[i].OrigLen != want[i].OrigLen || !bytes.Equal(got[i].Data, want[i].Data) {
			t.Fatalf("packet %d: %d %d %d bytes, want %d %d %d bytes", i, got[i].Timestamp, got[i].OrigLen, len(got[i].Data),
				want[i].Timestamp, want[i].OrigLen, len(want[i].Data))
		}
	}
}

// TestReplayMapped: a plain file is replayed from a mapping and
// delivers exactly the file's packets; the mapping is given back behind
// the reader.
func TestReplayMapped(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "in.pcap")
	if err := gen.WriteFile(path, gen.FileConfig{Count: 60000, Mix: gen.MixIMIX}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) < 2*releaseStep {
		t.Fatalf("input of %d bytes: the test wants it past two release steps", len(data))
	}
	want := readAll(t, data)
	m, got, err := replayQueued(t, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m == nil {
		t.Fatal("not mapped")
	}
	if m.done < len(data)-2*releaseStep {
		t.Errorf("%d bytes of the mapping given back, want at least %d", m.done, len(data)-2*releaseStep)
	}
	sameAsFile(t, got, want)
}

// TestReplayMappedGrows: packets appended to a file after it was mapped
// are read too (through read(2), past the mapping), as a replay that
// reads the file would.
func TestReplayMappedGrows(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "in.pcap")
	if err := gen.WriteFile(path, gen.FileConfig{Count: 3000, Mix: gen.MixIMIX}); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	first := 24 + 1000*16 // cut in the middle of a record: somewhere in the first thousand
	for i, r := 0, 24; i < 1000; i++ {
		r += 16 + int(uint32(data[r+8])|uint32(data[r+9])<<8|uint32(data[r+10])<<16|uint32(data[r+11])<<24)
		first = r
	}
	first += 7
	if err := os.WriteFile(path, data[:first], 0o644); err != nil {
		t.Fatal(err)
	}
	m, got, err := replayQueued(t, path, func() {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(data[first:]); err != nil {
			t.Fatal(err)
		}
		f.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	if m == nil {
		t.Error("not mapped")
	}
	sameAsFile(t, got, readAll(t, data))
}

// TestReplayMappedCutShort: a mapped file cut short while it is
// replayed ends the replay with an error that says so, not the process
// (the pages past the new end fault), and what was delivered is the
// packets wholly before the cut, unchanged: at a page boundary the copy
// faults; at a record boundary inside a page the rest of the page reads
// as zeros, which are not taken for a packet.
func TestReplayMappedCutShort(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src.pcap")
	if err := gen.WriteFile(src, gen.FileConfig{Count: 20000, Mix: gen.MixIMIX}); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(src)
	all := readAll(t, data)
	// ends[i] is the offset just past record i.
	ends := make([]int, len(all))
	for i, off := 0, 24; i < len(all); i++ {
		off += 16 + len(all[i].Data)
		ends[i] = off
	}
	page := os.Getpagesize()
	for _, tc := range []struct {
		name string
		at   int
	}{
		{"page boundary", (len(data) / 2) &^ (page - 1)},
		{"record boundary", ends[len(all)/3]},
		{"inside a record", ends[len(all)/4] + 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".pcap")
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			m, got, err := replayQueued(t, path, func() {
				if err := os.Truncate(path, int64(tc.at)); err != nil {
					t.Fatal(err)
				}
			})
			if m == nil {
				t.Fatal("not mapped")
			}
			if err == nil || !strings.Contains(err.Error(), "cut short") || !strings.Contains(err.Error(), path) {
				t.Fatalf("run = %v, want the file cut short", err)
			}
			whole := 0
			for whole < len(ends) && ends[whole] <= tc.at {
				whole++
			}
			if tc.name == "inside a record" && len(got) == whole+1 {
				// The record the cut fell in: its bytes past the cut read
				// as zeros up to the end of their page (documented).
				got = got[:whole]
			}
			t.Logf("cut at %d: %d packets delivered, %d wholly before the cut; %v", tc.at, len(got), whole, err)
			sameAsFile(t, got, all[:whole])
		})
	}
}

// TestReplayFIFO: a replay from a FIFO reads it as it comes, opened
// once (a second open would find no writer, and the writer a closed
// reader: CI's crash matrix and failover tests feed the agent so), and
// a plain file's copy through a FIFO delivers the same packets.
func TestReplayFIFO(t *testing.T) {
	dir := t.TempDir()
	src, fifo := filepath.Join(dir, "in.pcap"), filepath.Join(dir, "in.fifo")
	if err := gen.WriteFile(src, gen.FileConfig{Count: 5000, Mix: gen.MixIMIX}); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(src)
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// The readers' closes of the FIFO, counted by inotify: the agent's
	// one open must make one (opens themselves are not counted: inotify
	// merges the writer's and a reader's when they come together).
	ino, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ino)
	if _, err := unix.InotifyAddWatch(ino, fifo, unix.IN_CLOSE_NOWRITE|unix.IN_CLOSE_WRITE); err != nil {
		t.Fatal(err)
	}
	fed := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			fed <- err
			return
		}
		_, err = f.Write(data)
		fed <- errors.Join(err, f.Close())
	}()
	m, got, err := replayQueued(t, fifo, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-fed; err != nil {
		t.Fatalf("feeding the FIFO: %v", err)
	}
	if m != nil {
		t.Error("a FIFO was mapped")
	}
	sameAsFile(t, got, readAll(t, data))
	buf := make([]byte, 64*unix.SizeofInotifyEvent)
	n, err := unix.Read(ino, buf)
	if err != nil {
		t.Fatal(err)
	}
	closes := 0
	for off := 0; off+unix.SizeofInotifyEvent <= n; {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		if ev.Mask&unix.IN_CLOSE_NOWRITE != 0 {
			closes++
		}
		off += unix.SizeofInotifyEvent + int(ev.Len)
	}
	if closes != 1 {
		t.Errorf("the FIFO was closed by %d readers, want 1 (the agent, opening it once)", closes)
	}
}
