package collector

import (
	"testing"

	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/wire"
)

type recordingFeed struct {
	seqs    []uint64
	packets int
	names   []string
}

func (f *recordingFeed) Batch(ev *BatchEvent) {
	f.seqs = append(f.seqs, ev.Batch.Seq)
	it := ev.Batch.Iter(uint32(len(ev.Ifaces)))
	var r wire.Record
	for it.Next(&r) == nil {
		f.packets++
		f.names = append(f.names, ev.Agent+":"+ev.Ifaces[r.IfIndex].Name)
	}
}

// TestFeedSeesWrittenBatches: the feed gets every batch written, once,
// decompressed, with the session's interfaces; not the duplicates.
func TestFeedSeesWrittenBatches(t *testing.T) {
	f := &recordingFeed{}
	c := newCore(t, Config{Feed: f})
	s, _, err := c.begin(hello("fd", 1), Peer{}, func() {})
	if err != nil {
		t.Fatal(err)
	}
	s.batch(0, batchPayload(1, 0, 10))
	flags, p := compressedPayload(t, compress.Spec{Codec: compress.Zstd}, 2, 10, 10)
	s.batch(flags, p)
	s.batch(0, batchPayload(1, 0, 10)) // a resend: not passed on
	s.commit()
	s.end(true)
	if len(f.seqs) != 2 || f.seqs[0] != 1 || f.seqs[1] != 2 || f.packets != 20 {
		t.Fatalf("feed saw seqs %v, %d packets; want [1 2], 20", f.seqs, f.packets)
	}
	if f.names[0] != "fd:eth0" || f.names[1] != "fd:tun0" {
		t.Fatalf("interfaces %v", f.names[:2])
	}
}
