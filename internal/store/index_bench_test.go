package store

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// BenchmarkWriteIndex measures the store's write path (WriteBatch and
// Commit of batches of 256 IMIX UDP packets with text payloads, no
// fsync) with the index off and on, for each file codec: with the
// generator's one flow, and with a new source address and ports on
// every packet (the index's worst case: 3 new keys per packet). It
// reports the index's size as a share of the data file's (idx-%).
func BenchmarkWriteIndex(b *testing.B) {
	for _, fc := range []compress.Spec{{}, {Codec: compress.Gzip}, {Codec: compress.Zstd}} {
		for _, many := range []bool{false, true} {
			flows := "oneflow"
			if many {
				flows = "manyflows"
			}
			for _, on := range []bool{false, true} {
				name := fc.String() + "/" + flows + "/index=off"
				if on {
					name = fc.String() + "/" + flows + "/index=on"
				}
				b.Run(name, func(b *testing.B) { benchWriteIndex(b, fc, many, on) })
			}
		}
	}
}

func benchWriteIndex(b *testing.B, fc compress.Spec, many, on bool) {
	cfg := Config{FileCompress: fc, Fsync: FsyncNever, RotateSize: -1, RotateInterval: -1, IndexBlock: -1}
	if on {
		cfg.IndexBlock = 0
	}
	benchWrite(b, cfg, many, 16, true)
}

// benchWrite measures WriteBatch and Commit of batches of 256 IMIX UDP
// packets with text payloads into a store of cfg, one flow or a new
// one per packet (many), kinds different batches in turn, payloads of
// text (gen.TextPayload) or the generator's pseudo-random bytes, and reports
// the index's size as a share of the data file's (idx-%) and the data's
// compression ratio (ratio: pcapng bytes written over bytes on disk).
func benchWrite(b *testing.B, cfg Config, many bool, kinds int, text bool) {
	c := newCore(b, cfg)
	h := hello("bench", 1)
	w, err := c.Writer("bench")
	if err != nil {
		b.Fatal(err)
	}
	ifmap := []int{}
	for _, ifc := range h.Interfaces {
		i, err := w.AddInterface(ifc)
		if err != nil {
			b.Fatal(err)
		}
		ifmap = append(ifmap, i)
	}
	inst := c.Instance(h.Instance, "bench")
	const per = 256
	batches := make([]wire.Batch, kinds)
	raw := 0
	buf := make([]byte, 1500)
	for j := range batches {
		var e wire.BatchEncoder
		e.Reset(nil)
		for i := range per {
			k := uint64(j*per + i)
			n, _ := gen.MixIMIX.Size(k, nil)
			p := gen.Frame(buf[:n], gen.LinkTypeEthernet, 1, k)
			if text {
				gen.TextPayload(p[42:], 1, k)
			}
			if many {
				x := mix64(k)
				binary.BigEndian.PutUint32(p[14+12:], uint32(x))
				binary.BigEndian.PutUint32(p[34:], uint32(x>>32))
			}
			e.Append(int64(ixTS0+k*1000), 0, uint32(n), p)
			raw += n
		}
		bt, err := wire.ParseBatch(0, e.Finish(uint64(j + 1))[wire.HeaderSize:], wire.BatchLimits{Unchecked: true})
		if err != nil {
			b.Fatal(err)
		}
		batches[j] = bt
	}
	b.SetBytes(int64(raw / kinds))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		bt := batches[i%kinds]
		bt.Seq = uint64(i + 1)
		if _, err := w.WriteBatch(&bt, ifmap, inst); err != nil {
			b.Fatal(err)
		}
		if err := w.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	rawSize := w.file.w.Written()
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	var data, idx int64
	ents, _ := os.ReadDir(filepath.Join(c.Dir(), "bench"))
	for _, e := range ents {
		st, err := e.Info()
		if err != nil {
			continue
		}
		if index.IsIndex(e.Name()) {
			idx += st.Size()
		} else {
			data += st.Size()
		}
	}
	if data > 0 {
		b.ReportMetric(100*float64(idx)/float64(data), "idx-%")
		b.ReportMetric(float64(rawSize)/float64(data), "ratio")
	}
	c.Close()
}

// mix64 is a cheap 64-bit hash: a new address and ports per packet.
func mix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	return x
}

// BenchmarkZstdFrames measures the store's write path (as
// BenchmarkWriteIndex, index on, one flow) for zstd files of one frame
// per file and of a frame per index block (512 KiB), side by side: the
// cost of ending a frame at every block in time and in compression
// (ratio). 512 different batches (45 MB), so that what a frame holds
// does not repeat within zstd's window: run it with -benchtime=500x.
func BenchmarkZstdFrames(b *testing.B) {
	for _, payload := range []string{"text", "random"} {
		for _, frames := range []ZstdFrames{ZstdFramePerFile, ZstdFramePerBlock} {
			b.Run(payload+"/frames="+frames.String(), func(b *testing.B) {
				benchWrite(b, Config{FileCompress: compress.Spec{Codec: compress.Zstd}, ZstdFrames: frames,
					Fsync: FsyncNever, RotateSize: -1, RotateInterval: -1}, false, 512, payload == "text")
			})
		}
	}
}

// BenchmarkWriteFlows measures the store's write path (as
// BenchmarkWriteIndex: uncompressed, index on) with flow files off and
// on: with the generator's one flow (the pipeline benchmark's traffic)
// and with a new flow on every packet (the flow table's worst case).
func BenchmarkWriteFlows(b *testing.B) {
	for _, many := range []bool{false, true} {
		for _, on := range []bool{false, true} {
			name := map[bool]string{false: "oneflow", true: "manyflows"}[many] + map[bool]string{false: "/flows=off", true: "/flows=on"}[on]
			b.Run(name, func(b *testing.B) {
				cfg := Config{Fsync: FsyncNever, RotateSize: -1, RotateInterval: -1, Flows: on}
				benchWrite(b, cfg, many, 16, true)
			})
		}
	}
}
