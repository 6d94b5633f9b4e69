// Package roottest writes output roots for the tests of what reads
// them (the query listener, pcapsync query): packets of several agents
// through a real store, each recognisable by its timestamp and size.
package roottest

import (
	"context"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// Write writes n packets per agent through a real store below dir, in
// batches of 50: packet i of agent number ai (its index in agents) on
// eth0 and eth1 alternately (Ethernet, snaplen 65535), at base + i ms
// + ai µs, a generated UDP frame (gen.Frame, stream ai, sequence i) of
// 64 + i%700 bytes. rotate is the store's file size (0: its default).
func Write(t testing.TB, dir string, base, rotate int64, n int, agents ...string) {
	t.Helper()
	st, err := store.Open(store.Config{Dir: dir, Fsync: store.FsyncNever, RotateSize: rotate})
	if err != nil {
		t.Fatal(err)
	}
	for ai, a := range agents {
		w, err := st.Writer(a)
		if err != nil {
			t.Fatal(err)
		}
		inst := st.Instance([16]byte{byte(ai + 1)}, a)
		w.Start("host-" + a)
		var ifmap []int
		for _, name := range []string{"eth0", "eth1"} {
			i, err := w.AddInterface(wire.Interface{Name: name, LinkType: 1, SnapLen: 65535})
			if err != nil {
				t.Fatal(err)
			}
			ifmap = append(ifmap, i)
		}
		WriteBatches(t, w, inst, ifmap, n, 50, func(i int) (int64, uint32, []byte) {
			data := gen.Frame(make([]byte, 64+i%700), gen.LinkTypeEthernet, uint32(ai), uint64(i))
			return base + int64(i)*1e6 + int64(ai)*1e3, uint32(i % 2), data
		})
		w.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := st.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// WriteBatches writes n packets through w, perBatch to a batch (sequence
// 1, 2, ...), each batch committed: packet(i) gives packet i's time
// (Unix ns), interface (an index into ifmap) and frame.
func WriteBatches(t testing.TB, w *store.Writer, inst *store.Instance, ifmap []int, n, perBatch int, packet func(i int) (ts int64, iface uint32, frame []byte)) {
	t.Helper()
	var e wire.BatchEncoder
	for b := 0; b*perBatch < n; b++ {
		e.Reset(nil)
		for i := b * perBatch; i < min(n, (b+1)*perBatch); i++ {
			ts, iface, data := packet(i)
			e.Append(ts, iface, uint32(len(data)), data)
		}
		bt, err := wire.ParseBatch(0, e.Finish(uint64(b + 1))[wire.HeaderSize:], wire.BatchLimits{Unchecked: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteBatch(&bt, ifmap, inst); err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(); err != nil {
			t.Fatal(err)
		}
	}
}
