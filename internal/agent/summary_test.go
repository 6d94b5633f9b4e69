package agent

import (
	"encoding/json"
	"testing"
)

// TestSummaryText pins the agent's closing line: the text people and
// scripts have read since before --summary json, and what the pipeline
// benchmark parses from older binaries.
func TestSummaryText(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    Summary
		want string
	}{
		{"tcp", Summary{Read: 11, Sent: 12, Acked: 13, Dropped: 14, KernelDrops: 15, Unacked: 16, Reconnects: 17, RateDrops: 18},
			"packets read 11, sent 12, acknowledged 13, dropped by agent 14, dropped by kernel 15, unacknowledged 16, reconnects 17, dropped by rate limit 18"},
		{"uncompressed", Summary{Read: 1, RawBytes: 100, WireBytes: 100},
			"packets read 1, sent 0, acknowledged 0, dropped by agent 0, dropped by kernel 0, unacknowledged 0, reconnects 0, dropped by rate limit 0"},
		{"truncated and compressed", Summary{Read: 3, LinkTruncated: 2, RawBytes: 384000, WireBytes: 120000},
			"packets read 3, sent 0, acknowledged 0, dropped by agent 0, dropped by kernel 0, unacknowledged 0, reconnects 0, dropped by rate limit 0, truncated to the link type's limit 2, compressed 384000 to 120000 bytes (ratio 3.20)"},
		{"failovers", Summary{Read: 2, Sent: 2, Acked: 2, Reconnects: 3, Failovers: 3},
			"packets read 2, sent 2, acknowledged 2, dropped by agent 0, dropped by kernel 0, unacknowledged 0, reconnects 3, dropped by rate limit 0, failovers to the next collector 3"},
		{"recovered", Summary{Read: 2, Sent: 2, Acked: 2, Unacked: 4, Recovered: 7},
			"packets read 2, sent 2, acknowledged 2, dropped by agent 0, dropped by kernel 0, unacknowledged 4, reconnects 0, dropped by rate limit 0, recovered from the spool 7"},
		{"udp", Summary{Read: 5, Sent: 5, UDP: true, Datagrams: 21, SendErrors: 22, Pieced: 23, Pieces: 24},
			"packets read 5, sent 5, acknowledged 0, dropped by agent 0, dropped by kernel 0, unacknowledged 0, reconnects 0, dropped by rate limit 0, datagrams sent 21, send errors 22, batches sent in pieces 23 (pieces 24)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.s.String(); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestSummaryJSON pins the keys of --summary json, and that every field
// survives a round trip.
func TestSummaryJSON(t *testing.T) {
	s := Summary{Read: 1, Sent: 2, Acked: 3, Dropped: 4, RateDrops: 5, KernelDrops: 6, Unacked: 7, Recovered: 17, Reconnects: 8, Failovers: 16,
		LinkTruncated: 9, RawBytes: 10, WireBytes: 11, UDP: true, Datagrams: 12, SendErrors: 13, Pieced: 14, Pieces: 15}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"read":1,"sent":2,"acked":3,"dropped":4,"rate_drops":5,"kernel_drops":6,"unacked":7,"recovered":17,"reconnects":8,"failovers":16,"link_truncated":9,"raw_bytes":10,"wire_bytes":11,"udp":true,"datagrams":12,"send_errors":13,"pieced":14,"pieces":15}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
	var back Summary
	if err := json.Unmarshal(b, &back); err != nil || back != s {
		t.Errorf("round trip: %+v, %v; want %+v", back, err, s)
	}
}
