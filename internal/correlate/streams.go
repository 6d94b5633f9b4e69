package correlate

import (
	"container/heap"
	"io"
	"strings"

	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/query"
)

// ngStream is one pcapng stream of MergeStreams.
type ngStream struct {
	i      int
	r      *pcapfile.Reader
	p      pcapfile.Packet
	global []int // the stream's interfaces: the merge's Iface, -1 until seen
}

// ngHeap orders the streams by their current packet's time, then
// their order.
type ngHeap []*ngStream

func (h ngHeap) Len() int { return len(h) }
func (h ngHeap) Less(a, b int) bool {
	return h[a].p.Timestamp < h[b].p.Timestamp || h[a].p.Timestamp == h[b].p.Timestamp && h[a].i < h[b].i
}
func (h ngHeap) Swap(a, b int) { h[a], h[b] = h[b], h[a] }
func (h *ngHeap) Push(x any)   { *h = append(*h, x.(*ngStream)) }
func (h *ngHeap) Pop() (x any) { x, *h = (*h)[len(*h)-1], (*h)[:len(*h)-1]; return x }

// MergeStreams reads the pcapng streams srcs, each in timestamp order
// (the answers of query listeners, GET /query), and gives fn their
// packets in timestamp order, the earlier stream first at equal times,
// as a Source's Each does: each on its own interface per stream and
// interface, numbered from 0 in the order of first packets, its Agent
// the part of the interface's name before ':' ("web1:eth0"). Memory: a
// reader's buffer per stream. failed is the index of the stream whose
// reading failed, -1 when err is fn's or nil.
func MergeStreams(srcs []io.Reader, fn func(*query.Packet) error) (failed int, err error) {
	var h ngHeap
	for i, src := range srcs {
		r, err := pcapfile.NewReader(src, nil)
		if err != nil {
			return i, err
		}
		s := &ngStream{i: i, r: r}
		if err := s.r.ReadInto(&s.p); err == nil {
			h = append(h, s)
		} else if err != io.EOF {
			return i, err
		}
	}
	heap.Init(&h)
	var ifaces []pcapfile.Interface
	var pk query.Packet
	for len(h) > 0 {
		s := h[0]
		for len(s.global) <= s.p.Interface {
			s.global = append(s.global, -1)
		}
		g := &s.global[s.p.Interface]
		if *g < 0 {
			*g = len(ifaces)
			ifaces = append(ifaces, s.r.Interfaces()[s.p.Interface])
		}
		pk.Iface, pk.Interface, pk.Timestamp, pk.OrigLen, pk.Data = *g, &ifaces[*g], s.p.Timestamp, s.p.OrigLen, s.p.Data
		pk.Agent, _, _ = strings.Cut(pk.Interface.Name, ":")
		if err := fn(&pk); err != nil {
			return -1, err
		}
		switch err := s.r.ReadInto(&s.p); {
		case err == io.EOF:
			heap.Pop(&h)
		case err != nil:
			return s.i, err
		default:
			heap.Fix(&h, 0)
		}
	}
	return -1, nil
}
