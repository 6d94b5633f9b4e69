package redisfeed

import "fmt"

// Summary is what a Feed published, for the collector's closing lines.
// Its JSON form is one object whose keys are the field names in
// snake_case.
type Summary struct {
	Published  uint64 `json:"published"`  // batches added to a stream
	Dropped    uint64 `json:"dropped"`    // batches dropped: queue full, Redis down, slow or refusing
	Reconnects uint64 `json:"reconnects"` // times Redis came back after being down
	RawBytes   uint64 `json:"raw_bytes"`  // records published, uncompressed
	SentBytes  uint64 `json:"sent_bytes"` // records published, as stored (compressed)
}

// Summary returns the feed's counters now. Safe for concurrent use;
// final once Close returned.
func (f *Feed) Summary() Summary {
	c := &f.Counters
	return Summary{Published: c.Published.Load(), Dropped: c.Dropped.Load(), Reconnects: c.Reconnects.Load(),
		RawBytes: c.RawBytes.Load(), SentBytes: c.SentBytes.Load()}
}

// String renders s as the feed's line of the collector's summary.
func (s Summary) String() string {
	return fmt.Sprintf("redis feed: published %d, dropped %d, reconnects %d, records %d bytes stored as %d",
		s.Published, s.Dropped, s.Reconnects, s.RawBytes, s.SentBytes)
}
