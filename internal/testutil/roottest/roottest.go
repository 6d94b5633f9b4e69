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
		var e wire.BatchEncoder
		const perBatch = 50
		for b := 0; b*perBatch < n; b++ {
			e.Reset(nil)
			for i := b * perBatch; i < min(n, (b+1)*perBatch); i++ {
				data := gen.Frame(make([]byte, 64+i%700), gen.LinkTypeEthernet, uint32(ai), uint64(i))
				e.Append(base+int64(i)*1e6+int64(ai)*1e3, uint32(i%2), uint32(len(data)), data)
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
		w.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := st.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
