package flowtest

import (
	"context"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/flow"
	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/testutil/roottest"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// WriteStore writes ps as agent's packets (one Ethernet interface,
// iface) through a real store below dir with flow files on, in batches
// of BatchPackets committed one by one: small index blocks and files
// (blockBytes, rotate), so that flows span blocks and files as the
// collector writes them. It is the writer side of the flow readers'
// contract (the records' block runs are the store's index numbering).
func WriteStore(t testing.TB, dir, agent, iface string, ps []Packet, rotate, blockBytes int64, cfg flow.Config) {
	t.Helper()
	st, err := store.Open(store.Config{Dir: dir, Fsync: store.FsyncNever, RotateSize: rotate, IndexBlock: blockBytes, Flows: true, FlowTable: cfg})
	if err != nil {
		t.Fatal(err)
	}
	w, err := st.Writer(agent)
	if err != nil {
		t.Fatal(err)
	}
	inst := st.Instance([16]byte{1}, agent)
	w.Start("host-" + agent)
	i, err := w.AddInterface(wire.Interface{Name: iface, LinkType: 1, SnapLen: 65535})
	if err != nil {
		t.Fatal(err)
	}
	roottest.WriteBatches(t, w, inst, []int{i}, len(ps), BatchPackets, func(n int) (int64, uint32, []byte) {
		return ps[n].TS, 0, ps[n].Frame
	})
	w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := st.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
