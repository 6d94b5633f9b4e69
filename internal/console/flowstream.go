package console

import (
	"cmp"
	"container/heap"
	"fmt"
	"slices"

	"github.com/pcapsync/pcapsync/internal/flowquery"
)

// flowStream builds GET /api/flows' answer from the flows as
// flowquery.Each gives them, in one pass: their total, the page's rows
// (the offset+limit first by the page's order, held in a bounded heap),
// every flow's start and bytes for the chart (16 bytes a flow), and the
// top lists' sums. Its answer is what flowquery.Run's flows give to
// flowPage.page, chartOf and topLists; it never holds every flow.
type flowStream struct {
	pg     flowPage
	by     func(a, b *flowquery.Flow) int
	keep   int       // offset+limit: the rows held
	rows   heldFlows // the rows held, the last in the page's order first
	seq    int       // flows seen: Each's order, Run's for ties
	starts []flowStart
	tops   map[string]*flowquery.Summer
}

// heldFlow is a flow held for the page and its place in Each's order.
type heldFlow struct {
	f   flowquery.Flow
	seq int
}

// flowStart is what the chart counts of a flow: its start in ms and its
// bytes (both directions).
type flowStart struct {
	ms    int64
	bytes uint64
}

func newFlowStream(pg flowPage) (*flowStream, error) {
	tops, err := newTops()
	if err != nil {
		return nil, err
	}
	s := &flowStream{pg: pg, by: flowSorts[pg.Sort], keep: pg.Offset + pg.Limit, tops: tops}
	s.rows.before = s.before
	return s, nil
}

// before reports whether a comes before b in the page's order: the
// column in its order, then Run's (flowquery.CompareRun, then Each's
// order).
func (s *flowStream) before(a, b *heldFlow) bool { return s.order(a, b) < 0 }

// order compares a and b in the page's order (before's); 0 only for a
// flow with itself.
func (s *flowStream) order(a, b *heldFlow) int {
	c := s.by(&a.f, &b.f)
	if s.pg.Desc {
		c = -c
	}
	return cmp.Or(c, flowquery.CompareRun(&a.f, &b.f), cmp.Compare(a.seq, b.seq))
}

// add counts f (held only during the call; its Parts may be kept).
func (s *flowStream) add(f *flowquery.Flow) error {
	s.starts = append(s.starts, flowStart{ms: floorDiv(f.First, 1e6), bytes: f.Bytes[0] + f.Bytes[1]})
	for _, t := range s.tops {
		t.Add(f)
	}
	h := heldFlow{f: *f, seq: s.seq}
	s.seq++
	switch {
	case len(s.rows.h) < s.keep:
		heap.Push(&s.rows, h)
	case s.before(&h, &s.rows.h[0]):
		s.rows.h[0] = h
		heap.Fix(&s.rows, 0)
	}
	return nil
}

// answer is the page's rows, the total, the chart and the top lists.
func (s *flowStream) answer() (page []flowquery.JSON, total int, chart flowChart, tops map[string][]flowquery.Talker) {
	rows := s.rows.h
	slices.SortFunc(rows, func(a, b heldFlow) int { return s.order(&a, &b) })
	page = make([]flowquery.JSON, 0, max(0, len(rows)-s.pg.Offset))
	for i := s.pg.Offset; i < len(rows); i++ {
		page = append(page, rows[i].f.JSON())
	}
	return page, s.seq, chartOfStarts(s.starts), talkers(s.tops)
}

// heldFlows is a heap of the rows held, the last of them in the page's
// order at [0].
type heldFlows struct {
	h      []heldFlow
	before func(a, b *heldFlow) bool
}

func (h *heldFlows) Len() int           { return len(h.h) }
func (h *heldFlows) Less(i, j int) bool { return h.before(&h.h[j], &h.h[i]) }
func (h *heldFlows) Swap(i, j int)      { h.h[i], h.h[j] = h.h[j], h.h[i] }
func (h *heldFlows) Push(x any)         { h.h = append(h.h, x.(heldFlow)) }
func (h *heldFlows) Pop() any {
	x := h.h[len(h.h)-1]
	h.h = h.h[:len(h.h)-1]
	return x
}

// topKeys are the top lists of GET /api/flows by their answer's key and
// flowquery.Top's group.
var topKeys = map[string]string{"top_talkers": flowquery.GroupHost, "top_conversations": flowquery.GroupPair, "top_services": flowquery.GroupPort}

// newTops returns a Summer by bytes for each top list, by its key.
func newTops() (map[string]*flowquery.Summer, error) {
	tops := map[string]*flowquery.Summer{}
	for key, group := range topKeys {
		s, err := flowquery.NewSummer(group, flowquery.ByBytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		tops[key] = s
	}
	return tops, nil
}

// talkers are the TopTalkers of each of tops.
func talkers(tops map[string]*flowquery.Summer) map[string][]flowquery.Talker {
	out := map[string][]flowquery.Talker{}
	for key, s := range tops {
		out[key] = s.Top(TopTalkers)
	}
	return out
}
