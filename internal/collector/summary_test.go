package collector

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/pcapsync/pcapsync/internal/wire"
)

// fullSummary has every counter set, each to a value of its own.
func fullSummary() Summary {
	return Summary{Sessions: 1, Rejected: 2, ProtocolErrors: 3, Batches: 4, Packets: 5, Bytes: 6, Duplicates: 7,
		FileErrors: 8, PeerTimeouts: 9, OverLimit: 10, Truncated: 11, MissingBatches: 12,
		Compressed: 13, WireBytes: 14, RawBytes: 15, BadCompress: 16, TooLargeRaw: 17,
		UDP: &UDPSummary{Datagrams: 21, BatchDatagrams: 22, Lost: 23, Reordered: 24, Late: 25, Malformed: 26,
			Unknown: 27, Incomplete: 28, Evicted: 29, Agents: []UDPAgentSummary{{Name: "u1", UDPAgentCounts: UDPAgentCounts{
				SeqCounts: SeqCounts{Received: 31, Lost: 32, Reordered: 33, Duplicates: 34, Late: 35},
				Malformed: 36, Pieces: 37, Reassembled: 38, Incomplete: 39}}}}}
}

// TestSummaryText pins the collector's closing lines as they read
// before --summary json.
func TestSummaryText(t *testing.T) {
	full := fullSummary()
	tcp := full
	tcp.UDP = nil
	quiet := Summary{Sessions: 1, Batches: 2, Packets: 3, Bytes: 4}
	for _, tc := range []struct {
		name    string
		s       Summary
		total   string
		details []string
	}{
		{"quiet", quiet,
			"sessions 1, rejected 0, protocol errors 0, batches 2, packets 3, bytes 4, duplicates dropped 0, file errors 0, peer timeouts 0, over connection limit 0",
			nil},
		{"tcp", tcp,
			"sessions 1, rejected 2, protocol errors 3, batches 4, packets 5, bytes 6, duplicates dropped 7, file errors 8, peer timeouts 9, over connection limit 10",
			[]string{
				"11 packets truncated to their link type's limit (original length kept)",
				`LOST 12 batches: agents' sequences skipped them (see the log's "batches missing" lines)`,
				"compressed batches 13 (records 14 bytes as received, 15 decompressed), refused: corrupt 16, over the size limit 17",
			}},
		{"refused compression only", Summary{TooLargeRaw: 1}, "sessions 0, rejected 0, protocol errors 0, batches 0, packets 0, bytes 0, duplicates dropped 0, file errors 0, peer timeouts 0, over connection limit 0",
			[]string{"compressed batches 0 (records 0 bytes as received, 0 decompressed), refused: corrupt 0, over the size limit 1"}},
		{"udp", full,
			"sessions 1, rejected 2, protocol errors 3, batches 4, packets 5, bytes 6, duplicates dropped 7, file errors 8, peer timeouts 9, over connection limit 10" +
				", udp datagrams 21, batch datagrams 22, lost 23, reordered 24, late 25, malformed 26, from unknown sources 27, incomplete batches 28 (evicted 29)",
			tcp.Details()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.s.String(); got != tc.total {
				t.Errorf("totals line\ngot  %q\nwant %q", got, tc.total)
			}
			if got := tc.s.Details(); !slices.Equal(got, tc.details) {
				t.Errorf("details\ngot  %q\nwant %q", got, tc.details)
			}
		})
	}
	const agent = "udp agent u1: datagrams 31, lost 32, reordered 33, duplicates 34, late 35, malformed 36, pieces 37, batches reassembled 38, incomplete 39"
	if got := full.UDP.Agents[0].String(); got != agent {
		t.Errorf("udp agent line\ngot  %q\nwant %q", got, agent)
	}
}

// TestSummaryJSON pins the keys of --summary json and checks a round
// trip; "udp" is left out without a UDP server.
func TestSummaryJSON(t *testing.T) {
	full := fullSummary()
	b, err := json.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"sessions":1,"rejected":2,"protocol_errors":3,"batches":4,"packets":5,"bytes":6,"duplicates":7,"file_errors":8,"peer_timeouts":9,"over_limit":10,` +
		`"truncated":11,"missing_batches":12,"compressed":13,"wire_bytes":14,"raw_bytes":15,"bad_compress":16,"too_large_raw":17,` +
		`"udp":{"datagrams":21,"batch_datagrams":22,"lost":23,"reordered":24,"late":25,"malformed":26,"unknown":27,"incomplete":28,"evicted":29,` +
		`"agents":[{"name":"u1","received":31,"lost":32,"reordered":33,"duplicates":34,"late":35,"malformed":36,"pieces":37,"reassembled":38,"incomplete":39}]}}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
	var back Summary
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, full) {
		t.Errorf("round trip: %+v, want %+v", back, full)
	}
	if b, _ := json.Marshal(Summary{}); strings.Contains(string(b), "udp") {
		t.Errorf("a collector without UDP: %s, want no udp key", b)
	}
}

// TestCoreSummary: each Summary field reads its own counter, the core's
// or the store's.
func TestCoreSummary(t *testing.T) {
	c := newCore(t, Config{Insecure: true})
	t.Cleanup(func() { c.Close() })
	k, st := &c.Counters, &c.Store().Counters
	for i, ctr := range []*atomic.Uint64{&k.Sessions, &k.Rejected, &k.ProtocolErrors, &k.Batches, &k.Packets, &k.Bytes, &k.Duplicates,
		&st.FileErrors, &k.PeerTimeouts, &k.OverLimit, &st.Truncated, &k.MissingBatches,
		&k.Compressed, &k.WireBytes, &k.RawBytes, &k.BadCompress, &k.TooLargeRaw} {
		ctr.Store(uint64(i + 1))
	}
	want := fullSummary()
	want.UDP = nil
	if got := c.Summary(); got != want {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

// TestUDPSummary: the UDP totals are the sums over the agents (and the
// server's own counters), the agents sorted by name.
func TestUDPSummary(t *testing.T) {
	tu := startUDP(t, Config{})
	b, a := tu.dial(t), tu.dial(t)
	b.send(wire.AppendHello(nil, hello("b2", 2)))
	a.send(wire.AppendHello(nil, hello("a1", 1)))
	for _, seq := range []uint64{1, 3} { // 2 is counted lost when the session ends
		b.send(udpBatch(seq))
	}
	for _, seq := range []uint64{1, 2, 4, 3} {
		a.send(udpBatch(seq))
	}
	a.send([]byte("junk"))
	b.send(wire.AppendBye(nil))
	a.send(wire.AppendBye(nil))
	tu.dial(t).send(udpBatch(9)) // no session: unknown
	tu.stop()
	got := tu.srv.Summary()
	counts := tu.srv.AgentCounts()
	want := UDPSummary{Datagrams: tu.srv.Counters.Datagrams.Load(), Malformed: 1, Unknown: 1,
		Agents: []UDPAgentSummary{{"a1", counts["a1"]}, {"b2", counts["b2"]}}}
	for _, ag := range want.Agents {
		want.BatchDatagrams += ag.Received
		want.Lost += ag.Lost
		want.Reordered += ag.Reordered
		want.Late += ag.Late
		want.Incomplete += ag.Incomplete
	}
	if want.BatchDatagrams != 6 || want.Lost != 1 || want.Reordered != 1 {
		t.Fatalf("agent counts %+v: the test's traffic went wrong", counts)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}
