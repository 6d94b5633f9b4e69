package flowfile

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/flow"
	"github.com/pcapsync/pcapsync/internal/safefs"
)

// frame is an Ethernet/IPv4/UDP frame from 10.0.0.a:1000+a to 10.0.0.9:53.
func frame(a byte) []byte {
	p := make([]byte, 14+20+8+10)
	binary.BigEndian.PutUint16(p[12:], 0x0800)
	ip := p[14:]
	ip[0], ip[9] = 0x45, 17
	copy(ip[12:], []byte{10, 0, 0, a})
	copy(ip[16:], []byte{10, 0, 0, 9})
	binary.BigEndian.PutUint16(ip[20:], 1000+uint16(a))
	binary.BigEndian.PutUint16(ip[22:], 53)
	return p
}

// TestSidecar: the flow file a Sidecar builds names its data file,
// holds a record per flow with the blocks it was given, ends with the
// end record, and is Sound once written where Read finds it.
func TestSidecar(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "a1_20261127T000000.000Z.pcapng")
	if err := os.WriteFile(data, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	s, err := NewSidecar(nil)
	if err != nil {
		t.Fatal(err)
	}
	each := s.Start(data + ".part")
	for i := range 30 {
		p := frame(byte(i % 3))
		each(0, 1, int64(i)*1000, uint32(len(p)), uint32(len(p)), p, i/10)
	}
	b := s.Finish()
	if err := s.Write(dir, filepath.Base(data), b); err != nil {
		t.Fatal(err)
	}
	f, err := Read(data)
	if err != nil || !f.Final || f.Name != filepath.Base(data) || len(f.Records) != 3 {
		t.Fatalf("Read: %v, final %v, name %q, %d records", err, f != nil && f.Final, f.Name, len(f.Records))
	}
	for _, r := range f.Records {
		if r.TotalPackets() != 10 || len(r.Runs()) != 1 || r.Runs()[0] != (flow.BlockRun{First: 0, Last: 2}) {
			t.Fatalf("record %+v: want 10 packets in blocks 0..2", r)
		}
	}
	if !Sound(data) {
		t.Fatal("not Sound")
	}
	if _, err := NewSidecar(&flow.Config{MaxFlows: -1}); !errors.Is(err, flow.ErrConfig) {
		t.Fatalf("NewSidecar of a bad config: %v", err)
	}
}

// TestReadHostile: Read follows no link and refuses a file over
// MaxFileBytes before reading it; neither is Sound.
func TestReadHostile(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "a1_20261127T000000.000Z.pcapng")
	var e flow.Encoder
	good := e.AppendEnd(e.AppendHeader(nil, filepath.Base(data)), 0)
	target := filepath.Join(dir, "elsewhere")
	os.WriteFile(target, good, 0o640)
	if err := os.Symlink(target, flow.Path(data)); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(data); !errors.Is(err, safefs.ErrLink) || Sound(data) {
		t.Fatalf("Read through a link: %v", err)
	}
	os.Remove(flow.Path(data))
	os.WriteFile(flow.Path(data), good, 0o640)
	if !Sound(data) {
		t.Fatal("a good flow file not Sound")
	}
	os.Truncate(flow.Path(data), MaxFileBytes+1)
	if _, err := Read(data); !errors.Is(err, safefs.ErrTooLarge) || Sound(data) {
		t.Fatalf("Read of an oversize file: %v", err)
	}
}

// TestRebuildDirLeftovers: RebuildDir removes the flow files whose data
// file is gone and the temporary files of an interrupted rebuild older
// than a minute, as it removes indexes and theirs (counted apart from
// the indexes'), and leaves alone a
// flow file beside a data file being written, files named like flow
// files that it did not make, and fresh temporary files.
func TestRebuildDirLeftovers(t *testing.T) {
	dir := t.TempDir()
	var e flow.Encoder
	write := func(name string, b []byte, age time.Duration) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o640); err != nil {
			t.Fatal(err)
		}
		old := time.Now().Add(-age)
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	flows := func(name string) []byte { return e.AppendEnd(e.AppendHeader(nil, name), 0) }
	write("gone.pcapng.flows", flows("gone.pcapng"), 0)                         // orphan: removed
	write("other.pcapng.flows", flows("else.pcapng"), 0)                        // names another: foreign
	write("junk.pcapng.flows", []byte("not a flow file"), 0)                    // foreign
	write("live.pcapng.part", nil, 0)                                           // being written
	write("live.pcapng.flows", flows("live.pcapng"), 0)                         // its data file's
	write("gone.pcapng.flows.0123456789abcdef.tmp", []byte("x"), 2*time.Minute) // stale: removed
	write("gone2.pcapng.flows.0123456789abcdef.tmp", []byte("x"), 0)            // fresh: kept
	write("gone.pcapng.flows.0123456789abcdeg.tmp", []byte("x"), 2*time.Minute) // not Write's name: kept
	rep, err := RebuildDir(context.Background(), dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if rep.SidecarOrphans != 1 || rep.SidecarTemps != 1 || rep.Orphans != 0 || rep.Temps != 0 || rep.Foreign != 2 {
		t.Errorf("report %+v: want 1 orphan flow file, 1 temporary flow file (no index), 2 foreign", rep)
	}
	for name, want := range map[string]bool{
		"gone.pcapng.flows": false, "other.pcapng.flows": true, "junk.pcapng.flows": true,
		"live.pcapng.flows": true, "gone.pcapng.flows.0123456789abcdef.tmp": false,
		"gone2.pcapng.flows.0123456789abcdef.tmp": true, "gone.pcapng.flows.0123456789abcdeg.tmp": true,
	} {
		if _, err := os.Lstat(filepath.Join(dir, name)); (err == nil) != want {
			t.Errorf("%s: there %v, want %v", name, err == nil, want)
		}
	}
}
