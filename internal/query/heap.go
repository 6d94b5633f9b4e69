package query

// minHeap is a binary min-heap ordered by less, without the interface
// boxing of container/heap (no allocation per push once grown).
type minHeap[T any] struct {
	s    []T
	less func(a, b T) bool
}

func (h *minHeap[T]) len() int { return len(h.s) }

func (h *minHeap[T]) push(v T) {
	h.s = append(h.s, v)
	for i := len(h.s) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.less(h.s[i], h.s[p]) {
			break
		}
		h.s[i], h.s[p] = h.s[p], h.s[i]
		i = p
	}
}

// pop removes and returns the least element; the heap must not be empty.
func (h *minHeap[T]) pop() T {
	v := h.s[0]
	n := len(h.s) - 1
	h.s[0] = h.s[n]
	var zero T
	h.s[n] = zero
	h.s = h.s[:n]
	h.down(0)
	return v
}

// fix restores the order after the least element changed.
func (h *minHeap[T]) fix() { h.down(0) }

func (h *minHeap[T]) down(i int) {
	n := len(h.s)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && h.less(h.s[r], h.s[l]) {
			m = r
		}
		if !h.less(h.s[m], h.s[i]) {
			return
		}
		h.s[i], h.s[m] = h.s[m], h.s[i]
		i = m
	}
}
