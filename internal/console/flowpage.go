package console

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/pcapsync/pcapsync/internal/flow"
	"github.com/pcapsync/pcapsync/internal/flowquery"
)

// Bounds of GET /api/flows' page of rows.
const (
	// DefaultFlowRows is the rows of a page without limit.
	DefaultFlowRows = 100
	// MaxFlowRows bounds limit.
	MaxFlowRows = 1000
	// chartBuckets is about how many intervals the flows chart has.
	chartBuckets = 60
)

// flowSorts are the columns GET /api/flows sorts by (sort=); the
// numeric ones (packets, bytes) sort largest first by default, the
// others smallest (earliest, A to Z) first.
var flowSorts = map[string]func(a, b *flowquery.Flow) int{
	"first": func(a, b *flowquery.Flow) int { return cmp.Compare(a.First, b.First) },
	"last":  func(a, b *flowquery.Flow) int { return cmp.Compare(a.Last, b.Last) },
	"iface": func(a, b *flowquery.Flow) int { return strings.Compare(a.Iface, b.Iface) },
	"proto": func(a, b *flowquery.Flow) int {
		return strings.Compare(flowquery.ProtoName(&a.Key), flowquery.ProtoName(&b.Key))
	},
	"src": func(a, b *flowquery.Flow) int { return compareEnd(&a.Key, &b.Key, 0) },
	"dst": func(a, b *flowquery.Flow) int { return compareEnd(&a.Key, &b.Key, 1) },
	"packets": func(a, b *flowquery.Flow) int {
		return cmp.Compare(a.Packets[0]+a.Packets[1], b.Packets[0]+b.Packets[1])
	},
	"bytes":        func(a, b *flowquery.Flow) int { return cmp.Compare(a.Bytes[0]+a.Bytes[1], b.Bytes[0]+b.Bytes[1]) },
	"tcp_flags":    func(a, b *flowquery.Flow) int { return strings.Compare(tcpFlags(a), tcpFlags(b)) },
	"community_id": func(a, b *flowquery.Flow) int { return strings.Compare(a.CommunityID, b.CommunityID) },
}

func tcpFlags(f *flowquery.Flow) string { return flowquery.TCPFlags(f.TCPFlags[0] | f.TCPFlags[1]) }

// compareEnd orders flows by their source (side 0) or destination
// (side 1): IP flows by address then port, before link-layer flows by
// MAC address.
func compareEnd(a, b *flow.Key, side int) int {
	ipA, ipB := a.Kind == flow.KindIPv4 || a.Kind == flow.KindIPv6, b.Kind == flow.KindIPv4 || b.Kind == flow.KindIPv6
	if ipA != ipB {
		if ipA {
			return -1
		}
		return 1
	}
	if !ipA {
		if side == 0 {
			return bytes.Compare(a.Src[:6], b.Src[:6])
		}
		return bytes.Compare(a.Dst[:6], b.Dst[:6])
	}
	if side == 0 {
		return cmp.Or(a.SrcAddr().Compare(b.SrcAddr()), cmp.Compare(a.SrcPort, b.SrcPort))
	}
	return cmp.Or(a.DstAddr().Compare(b.DstAddr()), cmp.Compare(a.DstPort, b.DstPort))
}

// flowPage is what page of the flows GET /api/flows answers: sorted by
// a column (flowSorts) in an order, limit rows from offset.
type flowPage struct {
	Sort   string `json:"sort"`
	Desc   bool   `json:"desc"`
	Offset int    `json:"offset"`
	Limit  int    `json:"limit"`
}

// pageParams takes GET /api/flows' page parameters out of v: sort (a
// column of flowSorts, default first), order (asc or desc; default
// desc for packets and bytes, else asc), offset (default 0) and limit
// (1..MaxFlowRows, default DefaultFlowRows), each at most once.
func pageParams(v map[string][]string) (flowPage, error) {
	p := flowPage{Sort: "first", Limit: DefaultFlowRows}
	one := func(k string) (string, bool, error) {
		s, ok := v[k]
		delete(v, k)
		if len(s) > 1 {
			return "", false, fmt.Errorf("%s given %d times", k, len(s))
		}
		return strings.Join(s, ""), ok, nil
	}
	s, ok, err := one("sort")
	if err != nil {
		return p, err
	}
	if ok {
		if _, known := flowSorts[s]; !known {
			return p, fmt.Errorf("sort %q: want one of first, last, iface, proto, src, dst, packets, bytes, tcp_flags, community_id", s)
		}
		p.Sort = s
	}
	p.Desc = p.Sort == "packets" || p.Sort == "bytes"
	if s, ok, err = one("order"); err != nil {
		return p, err
	} else if ok {
		if s != "asc" && s != "desc" {
			return p, fmt.Errorf("order %q: want asc or desc", s)
		}
		p.Desc = s == "desc"
	}
	for _, k := range []struct {
		name     string
		dst      *int
		min, max int
	}{{"offset", &p.Offset, 0, DefaultMaxFlowsShown}, {"limit", &p.Limit, 1, MaxFlowRows}} {
		s, ok, err := one(k.name)
		if err != nil {
			return p, err
		}
		if !ok {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < k.min || n > k.max {
			return p, fmt.Errorf("%s %q: want a whole number %d..%d", k.name, s, k.min, k.max)
		}
		*k.dst = n
	}
	return p, nil
}

// DefaultMaxFlowsShown bounds offset: the flows a selection may hold
// (flowquery.DefaultMaxFlows).
const DefaultMaxFlowsShown = flowquery.DefaultMaxFlows

// rows sorts flows (as flowquery.Run returns them: by first time,
// agent, interface) by p's column, stably (ties keep Run's order), and
// returns the places in flows of p's rows.
func (p flowPage) rows(flows []flowquery.Flow) []int32 {
	by := flowSorts[p.Sort]
	perm := make([]int32, len(flows))
	for i := range perm {
		perm[i] = int32(i)
	}
	if p.Sort != "first" || p.Desc {
		// A permutation, ties by place: the sort moves indexes, not Flows.
		slices.SortFunc(perm, func(i, j int32) int {
			c := by(&flows[i], &flows[j])
			if p.Desc {
				c = -c
			}
			return cmp.Or(c, cmp.Compare(i, j))
		})
	}
	lo := min(p.Offset, len(flows))
	hi := min(lo+p.Limit, len(flows))
	return perm[lo:hi]
}

// page is p's rows of flows as JSON.
func (p flowPage) page(flows []flowquery.Flow) []flowquery.JSON {
	rows := p.rows(flows)
	out := make([]flowquery.JSON, 0, len(rows))
	for _, i := range rows {
		out = append(out, flows[i].JSON())
	}
	return out
}

// flowChart is the flows chart: in intervals of StepMs from the first
// flow's start (in ms, about chartBuckets of them, at least 1 ms), the
// flows whose first packet falls in each (Flows) and their bytes, both
// directions (Bytes). T holds each interval's start in Unix seconds.
type flowChart struct {
	StepMs int64     `json:"step_ms"`
	T      []float64 `json:"t"`
	Flows  []int64   `json:"flows"`
	Bytes  []uint64  `json:"bytes"`
}

// chartOf is the flows chart of flows.
func chartOf(flows []flowquery.Flow) flowChart {
	starts := make([]flowStart, len(flows))
	for i := range flows {
		starts[i] = flowStart{ms: floorDiv(flows[i].First, 1e6), bytes: flows[i].Bytes[0] + flows[i].Bytes[1]}
	}
	return chartOfStarts(starts)
}

// chartOfStarts is the flows chart of the flows whose starts these are.
func chartOfStarts(starts []flowStart) flowChart {
	c := flowChart{T: []float64{}, Flows: []int64{}, Bytes: []uint64{}}
	if len(starts) == 0 {
		return c
	}
	lo, hi := starts[0].ms, starts[0].ms
	for i := range starts {
		lo, hi = min(lo, starts[i].ms), max(hi, starts[i].ms)
	}
	c.StepMs = max(1, (hi-lo+1+chartBuckets-1)/chartBuckets)
	n := (hi-lo)/c.StepMs + 1
	c.T, c.Flows, c.Bytes = make([]float64, n), make([]int64, n), make([]uint64, n)
	for i := range c.T {
		c.T[i] = float64(lo+int64(i)*c.StepMs) / 1000
	}
	for i := range starts {
		b := (starts[i].ms - lo) / c.StepMs
		c.Flows[b]++
		c.Bytes[b] += starts[i].bytes
	}
	return c
}

// floorDiv is a/b rounded toward minus infinity (b > 0).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}
