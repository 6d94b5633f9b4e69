package console

import (
	"cmp"
	"context"
	"encoding/json"
	"net/netip"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/flow"
	"github.com/pcapsync/pcapsync/internal/flowquery"
	"github.com/pcapsync/pcapsync/internal/testutil/flowtest"
)

// streamRoot writes a root of seed's conversations seen by three agents
// (overlapping: equal first times across agents), records split every
// split packets, with ARP (flows that are not IP) and a host talking to
// itself. Agent a names its interface x:eth1: the interfaces sort
// otherwise than their agents.
func streamRoot(t *testing.T, seed uint64, n, split int) string {
	t.Helper()
	dir := t.TempDir()
	convs := flowtest.GenConvs(seed, n)
	self := netip.AddrFrom4([4]byte{10, 0, 0, 9})
	convs = append(convs, flowtest.Conv{Proto: flow.ProtoUDP, Src: self, Dst: self, Sport: 999, Dport: 53, N: 6})
	ps := flowtest.GenPackets(convs)
	for i := range 8 {
		f := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, byte(1 + i%2), 0x08, 0x06}
		ps = append(ps, flowtest.Packet{TS: flowtest.Base + int64(i)*7e6, C: len(convs) + i%2, Init: i%2 == 0, Frame: append(f, make([]byte, 28)...)})
	}
	slices.SortStableFunc(ps, func(a, b flowtest.Packet) int { return cmp.Compare(a.TS, b.TS) })
	flowtest.WriteRoot(t, dir, ps, []flowtest.Agent{
		{Name: "a", Iface: "x:eth1", PerFile: 29 + int(seed)},
		{Name: "b", Iface: "b:eth1", PerFile: 50, Keep: func(c int) bool { return c%2 == 0 }},
		{Name: "c", Iface: "c:eth0", PerFile: 17, Keep: func(c int) bool { return c%3 != 1 }},
	}, &flow.Config{SplitPackets: split})
	return dir
}

// TestFlowStreamDifferential: GET /api/flows' answer built in one pass
// (flowStream over flowquery.Each) is the answer of every flow joined
// (flowquery.Run, then flowPage.page, chartOf and topLists), over
// generated roots and selections, for every column, order, and offsets
// and limits (past the end included).
func TestFlowStreamDifferential(t *testing.T) {
	ctx := context.Background()
	for _, r := range []struct {
		seed     uint64
		n, split int
	}{{1, 40, 0}, {2, 90, 10}, {3, 7, 3}, {4, 150, 25}, {5, 1, 0}} {
		dir := streamRoot(t, r.seed, r.n, r.split)
		for _, cfg := range []flowquery.Config{
			{Dir: dir},
			{Dir: dir, Since: time.Unix(0, flowtest.Base+150e6), Until: time.Unix(0, flowtest.Base+260e6)},
			{Dir: dir, Filter: "udp or port 443", Agents: []string{"a", "c"}},
			{Dir: dir, Since: time.Unix(0, flowtest.Base+1e15)}, // no flow
		} {
			flows, _, err := flowquery.Run(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			tops, err := topLists(flows)
			if err != nil {
				t.Fatal(err)
			}
			wantRest := mustJSON(t, []any{len(flows), chartOf(flows), tops})
			// The flows as Each gives them, replayed into each page's
			// stream: one read of the root, not one a page.
			var read []flowquery.Flow
			if _, err := flowquery.Each(ctx, cfg, func(f *flowquery.Flow) error {
				read = append(read, *f)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			nf := len(flows)
			for col := range flowSorts {
				for _, desc := range []bool{false, true} {
					for _, off := range []int{0, 5, max(0, nf-3), nf + 7} {
						for _, lim := range []int{1, 4, DefaultFlowRows} {
							pg := flowPage{Sort: col, Desc: desc, Offset: off, Limit: lim}
							st, err := newFlowStream(pg)
							if err != nil {
								t.Fatal(err)
							}
							for i := range read {
								if err := st.add(&read[i]); err != nil {
									t.Fatal(err)
								}
							}
							page, total, chart, gotTops := st.answer()
							what := "seed " + strconv.Itoa(int(r.seed)) + " " + col + " desc " + strconv.FormatBool(desc) + " offset " + strconv.Itoa(off) + " limit " + strconv.Itoa(lim)
							if got, want := mustJSON(t, page), mustJSON(t, pg.page(flows)); got != want {
								t.Fatalf("%s (%+v): page\n%s\nwant\n%s", what, cfg, got, want)
							}
							if got := mustJSON(t, []any{total, chart, gotTops}); got != wantRest {
								t.Fatalf("%s (%+v): total, chart, tops\n%s\nwant\n%s", what, cfg, got, wantRest)
							}
							if len(st.rows.h) > off+lim {
								t.Fatalf("%s: %d rows held", what, len(st.rows.h))
							}
						}
					}
				}
			}
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
