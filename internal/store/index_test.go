package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/layout"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/testutil/capturetest"
	"github.com/pcapsync/pcapsync/internal/wire"
)

const ixTS0 = 1_700_000_000_000_000_000

// fileMode is a compression of the files and, for zstd, their frames.
type fileMode struct {
	fc     compress.Spec
	frames ZstdFrames
}

func (m fileMode) name() string {
	if m.frames != ZstdFramePerFile {
		return m.fc.String() + "-frame-per-" + m.frames.String()
	}
	return m.fc.String()
}

// config returns cfg with m's compression; a frame per block with the
// smallest blocks, so that small tests write many frames.
func (m fileMode) config(cfg Config) Config {
	cfg.FileCompress, cfg.ZstdFrames = m.fc, m.frames
	if m.frames == ZstdFramePerBlock && cfg.IndexBlock == 0 {
		cfg.IndexBlock = MinIndexBlock
	}
	return cfg
}

// fileModes are the ways the store writes files.
var fileModes = []fileMode{{}, {fc: compress.Spec{Codec: compress.Gzip}}, {fc: compress.Spec{Codec: compress.Zstd}},
	{fc: compress.Spec{Codec: compress.Zstd}, frames: ZstdFramePerBlock}}

// ipBatch is batch seq of n Ethernet/IPv4/UDP packets on interface 0,
// from host hostOf(seq) port 1000+seq to 192.0.2.1 port 53: packet
// k = first+i at ixTS0 + k*1000 ns, with 200 bytes of payload.
func ipBatch(seq uint64, first, n int) []byte {
	var e wire.BatchEncoder
	e.Reset(nil)
	p := make([]byte, 14+20+8+200)
	for i := range n {
		k := first + i
		binary.BigEndian.PutUint16(p[12:], 0x0800)
		ip := p[14:]
		ip[0], ip[9] = 0x45, 17
		src := hostOf(seq).As4()
		copy(ip[12:], src[:])
		copy(ip[16:], []byte{192, 0, 2, 1})
		binary.BigEndian.PutUint16(ip[20:], uint16(1000+seq))
		binary.BigEndian.PutUint16(ip[22:], 53)
		for j := range 200 {
			ip[28+j] = byte(k + j)
		}
		e.Append(int64(ixTS0+k*1000), 0, uint32(len(p)), p)
	}
	return e.Finish(seq)[wire.HeaderSize:]
}

func hostOf(seq uint64) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, byte(seq >> 8), byte(seq)}) }

// readSpans reads the packets of spans of ix, the index of the data
// file at path, as a query would: the head from offset 0, then each
// span from its Seek, decoded by the readers the store's files are
// written for (klauspost gzip and zstd, pcapfile).
func readSpans(t *testing.T, path string, ix *index.Index, spans []index.Span) []readPacket {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	decoded := func(seek int64) io.Reader {
		sr := io.NewSectionReader(f, seek, math.MaxInt64-seek)
		switch ix.Codec {
		case index.CodecGzip:
			zr, err := gzip.NewReader(sr)
			if err != nil {
				t.Fatalf("gzip at offset %d: %v", seek, err)
			}
			return zr
		case index.CodecZstd, index.CodecZstdFrames:
			zr, err := zstd.NewReader(sr, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(zr.Close)
			return endAtTear{zr}
		}
		return sr
	}
	head := make([]byte, ix.HeadEnd())
	if _, err := io.ReadFull(decoded(0), head); err != nil {
		t.Fatalf("reading the head: %v", err)
	}
	var pkts []readPacket
	for _, s := range spans {
		r := decoded(s.Seek)
		if _, err := io.CopyN(io.Discard, r, s.Raw-s.SeekRaw); err != nil {
			t.Fatalf("span %+v: skipping to its start: %v", s, err)
		}
		if s.RawEnd >= 0 {
			r = io.LimitReader(r, s.RawEnd-s.Raw)
		}
		pr, err := pcapfile.NewReader(io.MultiReader(bytes.NewReader(head), r), nil)
		if err != nil {
			t.Fatal(err)
		}
		for {
			p, err := pr.ReadPacket()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("span %+v (blocks %d..%d): %v", s, s.Block, s.Block+s.N-1, err)
			}
			pkts = append(pkts, readPacket{TS: p.Timestamp, Iface: pr.Interfaces()[p.Interface].Name, OrigLen: p.OrigLen, Data: p.Data})
		}
	}
	return pkts
}

// endAtTear ends a stream where a decoder finds it cut: the zstd frame
// of a file being written has no last block yet.
type endAtTear struct{ r io.Reader }

func (e endAtTear) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = io.EOF
	}
	return n, err
}

// dataFile returns the one data file of agent dir (fails t otherwise).
func dataFile(t *testing.T, dir string) string {
	t.Helper()
	var files []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if !index.IsIndex(e.Name()) {
			files = append(files, filepath.Join(dir, e.Name()))
		}
	}
	if len(files) != 1 {
		t.Fatalf("%d data files in %s, want 1: %v", len(files), dir, files)
	}
	return files[0]
}

// TestIndexWritten: the store writes an index beside every file as it
// writes it (readable while the file is open), publishes it with the
// file and counts it for retention; every block it names is a starting
// point where the store's readers read exactly its packets; a host or
// a time range selects only the blocks holding them; a rebuild from the
// data file gives the same bytes, and replaces a damaged index.
func TestIndexWritten(t *testing.T) {
	every := indexWriteInterval
	indexWriteInterval = 0 // every block at once: the index is read while written
	t.Cleanup(func() { indexWriteInterval = every })
	for _, fm := range fileModes {
		t.Run(fm.name(), func(t *testing.T) {
			c := newCore(t, Config{FileCompress: fm.fc, ZstdFrames: fm.frames, IndexBlock: MinIndexBlock})
			s, _, err := c.Begin(hello("ix", 1), func() {})
			if err != nil {
				t.Fatal(err)
			}
			const batches, per = 60, 10
			for seq := uint64(1); seq <= batches; seq++ {
				if _, err := s.Batch(0, ipBatch(seq, int(seq-1)*per, per)); err != nil {
					t.Fatal(err)
				}
				if _, err := s.Commit(); err != nil {
					t.Fatal(err)
				}
				if seq == batches/2 {
					part := dataFile(t, filepath.Join(c.Dir(), "ix"))
					live, err := index.Open(part)
					if err != nil || live.Final || len(live.All) < 5 {
						t.Fatalf("index of %s while written: %v (%+v)", filepath.Base(part), err, live)
					}
					// Its blocks and its tail: every packet committed so far, once.
					pkts := readSpans(t, part, live, append(live.Blocks(math.MinInt64, math.MaxInt64), live.Tail()))
					if len(pkts) != int(seq)*per {
						t.Fatalf("blocks and tail of the file being written: %d packets, want %d", len(pkts), seq*per)
					}
				}
			}
			s.End(true)
			path := dataFile(t, filepath.Join(c.Dir(), "ix"))
			ix, err := index.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			st, _ := os.Stat(path)
			ist, _ := os.Stat(index.Path(path))
			if !ix.Final || ix.DataSize != st.Size() || len(ix.All) < 10 {
				t.Fatalf("index: final %v, data size %d of %d, %d blocks", ix.Final, ix.DataSize, st.Size(), len(ix.All))
			}
			if _, err := os.Stat(index.Path(path + layout.PartSuffix)); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("the index's .part is left: %v", err)
			}
			counted := c.ret.Files("ix")[0].Bytes
			if counted != st.Size()+ist.Size() {
				t.Errorf("retention counts %d bytes, want the file's %d and its index's %d", counted, st.Size(), ist.Size())
			}
			t.Logf("%d blocks, index %d bytes for %d bytes of data", len(ix.All), ist.Size(), st.Size())

			// Each block alone: exactly its packets, in its times.
			total := 0
			for i, b := range ix.All {
				pkts := readSpans(t, path, ix, []index.Span{{Seek: b.Seek, SeekRaw: spanSeekRaw(ix, b), Raw: b.Raw, RawEnd: b.RawEnd, Block: i, N: 1}})
				if len(pkts) != b.Packets {
					t.Fatalf("block %d: %d packets read from offset %d, the index says %d", i, len(pkts), b.Seek, b.Packets)
				}
				for _, p := range pkts {
					if p.TS < b.First || p.TS > b.Last {
						t.Fatalf("block %d: packet at %d outside its %d..%d", i, p.TS, b.First, b.Last)
					}
				}
				total += len(pkts)
			}
			if total != batches*per {
				t.Fatalf("blocks hold %d packets, want %d", total, batches*per)
			}

			// One host: its batch's packets, from a few blocks.
			for _, seq := range []uint64{1, 17, batches} {
				spans := ix.Select(math.MinInt64, math.MaxInt64, index.Host(hostOf(seq)))
				pkts := readSpans(t, path, ix, spans)
				n := 0
				for _, p := range pkts {
					if binary.BigEndian.Uint16(p.Data[34:]) == uint16(1000+seq) {
						n++
					}
				}
				if n != per || len(pkts) > total/4 {
					t.Fatalf("host of batch %d: %d of its %d packets among %d read", seq, n, per, len(pkts))
				}
			}
			// A time range inside the file: its packets, and not many more.
			since, until := int64(ixTS0+203*1000), int64(ixTS0+241*1000)
			pkts := readSpans(t, path, ix, ix.Blocks(since, until))
			in := slices.DeleteFunc(slices.Clone(pkts), func(p readPacket) bool { return p.TS < since || p.TS >= until })
			if len(in) != 38 || len(pkts) > total/4 {
				t.Fatalf("range: %d packets in it among %d read; want 38", len(in), len(pkts))
			}

			// Rebuilt from the data file: the same bytes; damaged: rebuilt.
			live, _ := os.ReadFile(index.Path(path))
			for _, damage := range []func(){
				func() { os.Remove(index.Path(path)) },
				func() { b := slices.Clone(live); b[len(b)/2] ^= 4; os.WriteFile(index.Path(path), b, 0o640) },
				func() { os.WriteFile(index.Path(path), live[:len(live)-1], 0o640) },
			} {
				damage()
				if _, err := index.Open(path); err == nil {
					t.Fatal("a damaged index verified")
				}
				rep, err := index.RebuildDir(context.Background(), c.Dir(), MinIndexBlock)
				if err != nil || rep.Files != 1 || rep.Built+rep.Rebuilt != 1 {
					t.Fatalf("RebuildDir: %+v, %v", rep, err)
				}
				if again, _ := os.ReadFile(index.Path(path)); !bytes.Equal(again, live) {
					t.Fatalf("rebuilt index of %d bytes differs from the one written live (%d bytes)", len(again), len(live))
				}
			}
			if rep, err := index.RebuildDir(context.Background(), c.Dir(), MinIndexBlock); err != nil || rep.Valid != 1 || rep.Built+rep.Rebuilt+rep.Failed != 0 {
				t.Fatalf("RebuildDir again: %+v, %v; want the index left alone", rep, err)
			}
		})
	}
}

func spanSeekRaw(ix *index.Index, b index.Block) int64 {
	if ix.Codec == index.CodecZstd {
		return 0
	}
	return b.Raw
}

// TestIndexCrash: a crash leaves the index as .part beside the data
// file; repair removes it with the file's repair, and RebuildDir then
// indexes the repaired file.
func TestIndexCrash(t *testing.T) {
	every := indexWriteInterval
	indexWriteInterval = 0 // every block at once: a crash leaves an index
	t.Cleanup(func() { indexWriteInterval = every })
	for _, fm := range fileModes {
		t.Run(fm.name(), func(t *testing.T) {
			dir := t.TempDir()
			c := newCore(t, Config{Dir: dir, FileCompress: fm.fc, ZstdFrames: fm.frames, IndexBlock: MinIndexBlock})
			s, _, err := c.Begin(hello("ix", 1), func() {})
			if err != nil {
				t.Fatal(err)
			}
			for seq := uint64(1); seq <= 20; seq++ {
				if _, err := s.Batch(0, ipBatch(seq, int(seq-1)*10, 10)); err != nil {
					t.Fatal(err)
				}
				if _, err := s.Commit(); err != nil {
					t.Fatal(err)
				}
			}
			part := dataFile(t, filepath.Join(dir, "ix"))
			if _, err := os.Stat(index.Path(part)); err != nil {
				t.Fatalf("no index beside %s: %v", part, err)
			}
			af := &c.writers["ix"].file
			af.bw.Flush()
			af.f.Close() // the process is gone
			c.die()

			newCore(t, Config{Dir: dir, FileCompress: fm.fc, ZstdFrames: fm.frames, IndexBlock: MinIndexBlock}) // repairs
			path := dataFile(t, filepath.Join(dir, "ix"))
			if path+layout.PartSuffix != part {
				t.Fatalf("after repair %s, want %s published", path, part)
			}
			ents, _ := os.ReadDir(filepath.Join(dir, "ix"))
			if len(ents) != 1 {
				t.Fatalf("after repair: %d files, want only the data file (its index removed)", len(ents))
			}
			rep, err := index.RebuildDir(context.Background(), dir, MinIndexBlock)
			if err != nil || rep.Built != 1 {
				t.Fatalf("RebuildDir: %+v, %v", rep, err)
			}
			ix, err := index.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(readSpans(t, path, ix, ix.Blocks(math.MinInt64, math.MaxInt64))); n != 200 {
				t.Fatalf("rebuilt index: %d packets, want 200", n)
			}
		})
	}
}

// TestIndexAbandon: a file cut back after a write error loses its
// index, which would describe what was cut.
func TestIndexAbandon(t *testing.T) {
	c := newCore(t, Config{IndexBlock: MinIndexBlock})
	s, _, err := c.Begin(hello("ix", 1), func() {})
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 5; seq++ {
		s.Batch(0, ipBatch(seq, int(seq-1)*10, 10))
		s.Commit()
	}
	w := c.writers["ix"]
	w.mu.Lock()
	w.file.abandon()
	w.mu.Unlock()
	path := dataFile(t, filepath.Join(c.Dir(), "ix"))
	if _, err := index.Open(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("index of a file cut back: %v, want none", err)
	}
}

// TestIndexLargePacket: a packet block larger than a rebuild reads
// whole (a D-Bus message of 2 MiB) is indexed by the rebuild as by the
// store.
func TestIndexLargePacket(t *testing.T) {
	for _, fm := range fileModes {
		t.Run(fm.name(), func(t *testing.T) {
			h := &wire.Hello{Instance: [16]byte{9}, Name: "dbus", Host: "h1",
				Interfaces: []wire.Interface{{Name: "system", LinkType: 231, SnapLen: 1 << 27}, {Name: "eth0", LinkType: 1, SnapLen: 1 << 18}}}
			c := newCore(t, Config{FileCompress: fm.fc, ZstdFrames: fm.frames, IndexBlock: MinIndexBlock})
			s, _, err := c.Begin(h, func() {})
			if err != nil {
				t.Fatal(err)
			}
			for seq := uint64(1); seq <= 4; seq++ {
				var e wire.BatchEncoder
				e.Reset(nil)
				e.Append(int64(seq*10), 0, 100, make([]byte, 100))
				e.Append(int64(seq*10+1), 0, 2<<20, make([]byte, 2<<20))
				p := ipBatch(seq, int(seq)*10, 1)
				b, _ := wire.ParseBatch(0, p, wire.BatchLimits{Unchecked: true})
				var r wire.Record
				it := b.Iter(2)
				for it.Next(&r) == nil {
					e.Append(int64(seq*10+2), 1, r.OrigLen, r.Data)
				}
				if _, err := s.Batch(0, e.Finish(seq)[wire.HeaderSize:]); err != nil {
					t.Fatal(err)
				}
				if _, err := s.Commit(); err != nil {
					t.Fatal(err)
				}
			}
			s.End(true)
			path := dataFile(t, filepath.Join(c.Dir(), "dbus"))
			live, err := os.ReadFile(index.Path(path))
			if err != nil {
				t.Fatal(err)
			}
			rebuilt, err := index.Build(context.Background(), path, MinIndexBlock)
			if err != nil || !bytes.Equal(rebuilt, live) {
				t.Fatalf("rebuilt index differs from the live one (%v)", err)
			}
			ix, err := index.Open(path)
			if err != nil || len(ix.All) != 4 || len(ix.Select(math.MinInt64, math.MaxInt64, index.Host(hostOf(3)))) != 1 {
				t.Fatalf("index %+v (%v): want 4 blocks, host of batch 3 in one", ix, err)
			}
		})
	}
}

// TestIndexWriteError: an index that cannot be written is dropped and
// counted (Counters.IndexErrors), never a file error, and the data file
// keeps every packet.
func TestIndexWriteError(t *testing.T) {
	every := indexWriteInterval
	indexWriteInterval = 0
	t.Cleanup(func() { indexWriteInterval = every })
	c := newCore(t, Config{IndexBlock: MinIndexBlock})
	s, _, err := c.Begin(hello("ixerr", 1), func() {})
	if err != nil {
		t.Fatal(err)
	}
	const batches, per = 40, 10
	for seq := uint64(1); seq <= batches; seq++ {
		if _, err := s.Batch(0, ipBatch(seq, int(seq-1)*per, per)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Commit(); err != nil {
			t.Fatal(err)
		}
		if seq == 5 {
			// The index's file becomes a directory: the next append fails.
			ix := index.Path(dataFile(t, filepath.Join(c.Dir(), "ixerr")))
			if err := os.Remove(ix); err != nil {
				t.Fatalf("the index of the file being written: %v", err)
			}
			if err := os.Mkdir(ix, 0o750); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.End(true)
	if n := c.Counters.IndexErrors.Load(); n != 1 {
		t.Errorf("%d index errors counted, want 1", n)
	}
	if n := c.Counters.FileErrors.Load(); n != 0 {
		t.Errorf("%d file errors counted, want 0", n)
	}
	path := dataFile(t, filepath.Join(c.Dir(), "ixerr"))
	if _, err := index.Open(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("index of %s: %v, want none", filepath.Base(path), err)
	}
	if pkts := capturetest.ReadFile(t, path); len(pkts) != batches*per {
		t.Errorf("%d packets in the file, want %d", len(pkts), batches*per)
	}
}
