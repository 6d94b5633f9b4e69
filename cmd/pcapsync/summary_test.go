package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/pcapsync/pcapsync/internal/agent"
	"github.com/pcapsync/pcapsync/internal/collector"
	"github.com/pcapsync/pcapsync/internal/redisfeed"
	"github.com/pcapsync/pcapsync/internal/serve"
	"github.com/pcapsync/pcapsync/internal/tap"
)

// fullCollectorSummary has every part and every counter set, each to a
// value of its own, and two UDP agents.
func fullCollectorSummary() collectorSummary {
	return collectorSummary{serve.Summary{
		Summary: collector.Summary{Sessions: 1, Rejected: 2, ProtocolErrors: 3, Batches: 4, Packets: 5, Bytes: 6, Duplicates: 7,
			FileErrors: 8, PeerTimeouts: 9, OverLimit: 10, Truncated: 11, MissingBatches: 12,
			Compressed: 13, WireBytes: 14, RawBytes: 15, BadCompress: 16, TooLargeRaw: 17,
			UDP: &collector.UDPSummary{Datagrams: 21, BatchDatagrams: 22, Lost: 23, Reordered: 24, Late: 25, Malformed: 26,
				Unknown: 27, Incomplete: 28, Evicted: 29, Agents: []collector.UDPAgentSummary{
					{Name: "a1", UDPAgentCounts: collector.UDPAgentCounts{SeqCounts: collector.SeqCounts{Received: 31, Lost: 32, Reordered: 33, Duplicates: 34, Late: 35},
						Malformed: 36, Pieces: 37, Reassembled: 38, Incomplete: 39}},
					{Name: "b2", UDPAgentCounts: collector.UDPAgentCounts{SeqCounts: collector.SeqCounts{Received: 41}}},
				}}},
		Tap:   &tap.Summary{Clients: 51, Rejected: 52, DroppedSlow: 53, Packets: 54, Bytes: 55},
		Redis: &redisfeed.Summary{Published: 61, Dropped: 62, Reconnects: 63, RawBytes: 64, SentBytes: 65},
	}}
}

// TestSummaryText pins the processes' closing lines, in their order, as
// they were before --summary json.
func TestSummaryText(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    processSummary
		want string
	}{
		{"agent", agentSummary{agent.Summary{Read: 3000, Sent: 3000, Acked: 3000}},
			"pcapsync agent: packets read 3000, sent 3000, acknowledged 3000, dropped by agent 0, dropped by kernel 0, unacknowledged 0, reconnects 0, dropped by rate limit 0\n"},
		{"collector alone", collectorSummary{serve.Summary{Summary: collector.Summary{Sessions: 1, Batches: 2, Packets: 3, Bytes: 4}}},
			"pcapsync collector: sessions 1, rejected 0, protocol errors 0, batches 2, packets 3, bytes 4, duplicates dropped 0, file errors 0, peer timeouts 0, over connection limit 0\n"},
		{"collector with every part", fullCollectorSummary(), `pcapsync collector: udp agent a1: datagrams 31, lost 32, reordered 33, duplicates 34, late 35, malformed 36, pieces 37, batches reassembled 38, incomplete 39
pcapsync collector: udp agent b2: datagrams 41, lost 0, reordered 0, duplicates 0, late 0, malformed 0, pieces 0, batches reassembled 0, incomplete 0
pcapsync collector: sessions 1, rejected 2, protocol errors 3, batches 4, packets 5, bytes 6, duplicates dropped 7, file errors 8, peer timeouts 9, over connection limit 10, udp datagrams 21, batch datagrams 22, lost 23, reordered 24, late 25, malformed 26, from unknown sources 27, incomplete batches 28 (evicted 29)
pcapsync collector: tap clients 51, refused 52, dropped as too slow 53, packets sent 54, bytes sent 55
pcapsync collector: 11 packets truncated to their link type's limit (original length kept)
pcapsync collector: LOST 12 batches: agents' sequences skipped them (see the log's "batches missing" lines)
pcapsync collector: compressed batches 13 (records 14 bytes as received, 15 decompressed), refused: corrupt 16, over the size limit 17
pcapsync collector: redis feed: published 61, dropped 62, reconnects 63, records 64 bytes stored as 65
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := summaryText.print(&b, tc.s); err != nil {
				t.Fatal(err)
			}
			if got := b.String(); got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// TestSummaryJSON: --summary json prints one line holding one object,
// which decodes (no key unknown to the structs) into what was printed.
func TestSummaryJSON(t *testing.T) {
	roundTrip := func(t *testing.T, s processSummary, back any) string {
		t.Helper()
		var b bytes.Buffer
		if err := summaryJSON.print(&b, s); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "}\n") {
			t.Fatalf("want one line holding one object, got %q", out)
		}
		dec := json.NewDecoder(strings.NewReader(out))
		dec.DisallowUnknownFields()
		if err := dec.Decode(back); err != nil {
			t.Fatalf("decoding %s: %v", out, err)
		}
		return out
	}
	t.Run("agent", func(t *testing.T) {
		want := agent.Summary{Read: 1, Sent: 2, Acked: 3, UDP: true, Pieces: 4}
		var got agent.Summary
		roundTrip(t, agentSummary{want}, &got)
		if got != want {
			t.Errorf("got %+v, want %+v", got, want)
		}
	})
	t.Run("collector", func(t *testing.T) {
		want := fullCollectorSummary()
		var got collectorSummary
		out := roundTrip(t, want, &got)
		if b, _ := json.Marshal(got); string(b)+"\n" != out {
			t.Errorf("decoded and encoded again:\n%s\nwant\n%s", b, out)
		}
		for _, key := range []string{`{"sessions":1,`, `"udp":{"datagrams":21,`, `"agents":[{"name":"a1",`, `"tap":{"clients":51,`, `"redis":{"published":61,`} {
			if !strings.Contains(out, key) {
				t.Errorf("%s: no %s", out, key)
			}
		}
	})
	t.Run("collector without parts", func(t *testing.T) {
		var b bytes.Buffer
		summaryJSON.print(&b, collectorSummary{serve.Summary{Summary: collector.Summary{Sessions: 1}}})
		for _, key := range []string{"udp", "tap", "redis"} {
			if strings.Contains(b.String(), `"`+key+`"`) {
				t.Errorf("%s: a part that did not run has its key %q", b.String(), key)
			}
		}
	})
}

// TestSummaryFlag: --summary takes text or json, defaults to text, and
// refuses anything else as a usage error.
func TestSummaryFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want summaryFormat
		ok   bool
	}{
		{nil, summaryText, true},
		{[]string{"--summary", "text"}, summaryText, true},
		{[]string{"--summary=json"}, summaryJSON, true},
		{[]string{"--summary", "JSON"}, 0, false},
		{[]string{"--summary", "yaml"}, 0, false},
	} {
		fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f := addSummaryFlag(fs)
		err := fs.Parse(tc.args)
		if tc.ok != (err == nil) {
			t.Errorf("%q: err %v, want ok %v", tc.args, err, tc.ok)
			continue
		}
		if tc.ok && *f != tc.want {
			t.Errorf("%q: %v, want %v", tc.args, f, tc.want)
		}
	}
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	addSummaryFlag(fs)
	if d := fs.Lookup("summary").DefValue; d != "text" {
		t.Errorf("default %q, want text", d)
	}
}

// errWriter fails every write.
type errWriter struct{}

func (errWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// TestSummaryWriteError: a summary that cannot be written is an error.
func TestSummaryWriteError(t *testing.T) {
	for _, f := range []summaryFormat{summaryText, summaryJSON} {
		if err := f.print(errWriter{}, fullCollectorSummary()); err == nil || !strings.Contains(err.Error(), "disk full") {
			t.Errorf("%v: err %v, want the write's", &f, err)
		}
	}
}
