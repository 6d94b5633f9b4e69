package query

import (
	"bytes"
	"context"
	"testing"
)

// BenchmarkQueryFilter: a query of 20 000 packets of one agent,
// filtered, through its whole path (compile, read, filter, write),
// without the index, so that every packet meets the filter.
func BenchmarkQueryFilter(b *testing.B) {
	dir := b.TempDir()
	var batches [][]tp
	for i := range 20 {
		var batch []tp
		for j := range 1000 {
			n := int64(i*1000 + j)
			batch = append(batch, tp{ts: n * 1000, iface: j % 2, port: uint16(7 + j%5)})
		}
		batches = append(batches, batch)
	}
	writeAgent(b, dir, agentSpec{name: "b1", batches: batches}, 0)
	for _, filter := range []string{"udp", "not udp port 7 and greater 60"} {
		b.Run(filter, func(b *testing.B) {
			var buf bytes.Buffer
			b.ReportAllocs()
			for b.Loop() {
				buf.Reset()
				if _, err := Run(context.Background(), Config{Dir: dir, Filter: filter, NoIndex: true}, &buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
