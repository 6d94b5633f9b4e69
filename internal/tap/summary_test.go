package tap

import (
	"encoding/json"
	"testing"
)

// TestSummary pins the tap's summary line and its JSON keys.
func TestSummary(t *testing.T) {
	tp, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := &tp.Counters
	c.Clients.Store(1)
	c.Rejected.Store(2)
	c.DroppedSlow.Store(3)
	c.Packets.Store(4)
	c.Bytes.Store(5)
	s := tp.Summary()
	if got, want := s.String(), "tap clients 1, refused 2, dropped as too slow 3, packets sent 4, bytes sent 5"; got != want {
		t.Errorf("line\ngot  %q\nwant %q", got, want)
	}
	b, err := json.Marshal(s)
	if want := `{"clients":1,"rejected":2,"dropped_slow":3,"packets":4,"bytes":5}`; err != nil || string(b) != want {
		t.Errorf("JSON\ngot  %s (%v)\nwant %s", b, err, want)
	}
}
