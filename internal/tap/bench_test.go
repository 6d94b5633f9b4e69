package tap

import (
	"fmt"
	"testing"

	"github.com/pcapsync/pcapsync/internal/wire"
)

// BenchmarkBatch: what the tap adds to the collector's write path per
// batch of 100 packets: nothing without clients; with one, the copy
// into its queue (which the benchmark empties as a fast client would).
func BenchmarkBatch(b *testing.B) {
	for _, size := range []int{64, 576, 1500, 9000} {
		ev := event(b, "a1", 1, 0, 100, size)
		for _, clients := range []int{0, 1} {
			b.Run(fmt.Sprintf("size=%d/clients=%d", size, clients), func(b *testing.B) {
				tp, _ := New(Config{})
				var c *client
				if clients == 1 {
					c = &client{t: tp, wake: make(chan struct{}, 1), ifcache: map[string][]wire.Interface{}}
					tp.add(c)
				}
				b.ReportAllocs()
				b.SetBytes(int64(100 * size))
				for b.Loop() {
					tp.Batch(ev)
					if c != nil {
						q, _ := c.take()
						for _, it := range q {
							c.done(it)
						}
					}
				}
			})
		}
	}
}
