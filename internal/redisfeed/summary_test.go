package redisfeed

import (
	"encoding/json"
	"testing"
)

// TestSummary pins the feed's summary line and its JSON keys.
func TestSummary(t *testing.T) {
	var f Feed
	c := &f.Counters
	c.Published.Store(1)
	c.Dropped.Store(2)
	c.Reconnects.Store(3)
	c.RawBytes.Store(4)
	c.SentBytes.Store(5)
	s := f.Summary()
	if got, want := s.String(), "redis feed: published 1, dropped 2, reconnects 3, records 4 bytes stored as 5"; got != want {
		t.Errorf("line\ngot  %q\nwant %q", got, want)
	}
	b, err := json.Marshal(s)
	if want := `{"published":1,"dropped":2,"reconnects":3,"raw_bytes":4,"sent_bytes":5}`; err != nil || string(b) != want {
		t.Errorf("JSON\ngot  %s (%v)\nwant %s", b, err, want)
	}
}
