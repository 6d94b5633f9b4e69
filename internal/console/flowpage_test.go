package console

import (
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/pcapsync/pcapsync/internal/flowquery"
)

// flowsAnswer is what the test reads of GET /api/flows.
type flowsAnswer struct {
	Flows []flowquery.JSON `json:"flows"`
	Total int              `json:"total"`
	Chart struct {
		Flows []int64  `json:"flows"`
		Bytes []uint64 `json:"bytes"`
	} `json:"chart"`
	Error string `json:"error"`
}

// endOrder orders "addr" and port as the test reads them: IP addresses
// (by their order as addresses), then MACs (as text).
func endOrder(ip string, port uint16, mac string) func(ip2 string, port2 uint16, mac2 string) int {
	return func(ip2 string, port2 uint16, mac2 string) int {
		if (ip == "") != (ip2 == "") {
			if ip != "" {
				return -1
			}
			return 1
		}
		if ip == "" {
			return strings.Compare(mac, mac2)
		}
		return cmp.Or(netip.MustParseAddr(ip).Compare(netip.MustParseAddr(ip2)), cmp.Compare(port, port2))
	}
}

// byColumn compares two flows as the page's column names them, by
// their JSON: the test's own reading of each column.
func byColumn(col string, a, b *flowquery.JSON) int {
	switch col {
	case "first":
		return strings.Compare(a.First, b.First) // TimeLayout sorts as text
	case "last":
		return strings.Compare(a.Last, b.Last)
	case "iface":
		return strings.Compare(a.Iface, b.Iface)
	case "proto":
		return strings.Compare(a.Proto, b.Proto)
	case "src":
		return endOrder(a.SrcIP, a.SrcPort, a.SrcMAC)(b.SrcIP, b.SrcPort, b.SrcMAC)
	case "dst":
		return endOrder(a.DstIP, a.DstPort, a.DstMAC)(b.DstIP, b.DstPort, b.DstMAC)
	case "packets":
		return cmp.Compare(a.SrcPackets+a.DstPackets, b.SrcPackets+b.DstPackets)
	case "bytes":
		return cmp.Compare(a.SrcBytes+a.DstBytes, b.SrcBytes+b.DstBytes)
	case "tcp_flags":
		return strings.Compare(a.TCPFlags, b.TCPFlags)
	}
	return strings.Compare(a.CommunityID, b.CommunityID)
}

// TestFlowsPage: GET /api/flows pages the flows on the server: for
// every column and order, the pages walked by offset hold every flow
// flowquery.Run selects exactly once, in the column's order (ties in
// Run's order), with their total; the chart counts every flow and its
// bytes; a bad sort, order, offset
// or limit, or one given twice, is a 400 naming it.
func TestFlowsPage(t *testing.T) {
	fx := newFixture(t)
	cookie := fx.login(t, testToken).Cookies()[0]
	flows, _, err := flowquery.Run(context.Background(), flowquery.Config{Dir: fx.dir})
	if err != nil || len(flows) < 10 {
		t.Fatalf("flowquery.Run: %d flows, %v", len(flows), err)
	}
	at := map[string]int{} // a flow's JSON -> its place in Run's order
	var bytes uint64
	for i := range flows {
		b, _ := json.Marshal(flows[i].JSON())
		at[string(b)] = i
		bytes += flows[i].Bytes[0] + flows[i].Bytes[1]
	}
	get := func(q url.Values) flowsAnswer {
		t.Helper()
		resp, body := fx.get(t, "/api/flows?"+q.Encode(), cookie)
		var a flowsAnswer
		if err := json.Unmarshal(body, &a); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /api/flows?%s: %s %s", q.Encode(), resp.Status, body)
		}
		return a
	}
	for col := range flowSorts {
		for _, order := range []string{"asc", "desc"} {
			var rows []flowquery.JSON
			for off := 0; ; off += 4 {
				a := get(url.Values{"sort": {col}, "order": {order}, "offset": {strconv.Itoa(off)}, "limit": {"4"}})
				if a.Total != len(flows) {
					t.Fatalf("%s %s: total %d; flowquery.Run selects %d", col, order, a.Total, len(flows))
				}
				if len(a.Flows) == 0 {
					break
				}
				rows = append(rows, a.Flows...)
			}
			if len(rows) != len(flows) {
				t.Fatalf("%s %s: the pages hold %d flows of %d", col, order, len(rows), len(flows))
			}
			seen := map[int]bool{}
			prev := -1
			for i := range rows {
				b, _ := json.Marshal(rows[i])
				j, ok := at[string(b)]
				if !ok || seen[j] {
					t.Fatalf("%s %s: row %d %s: not one of Run's flows, or twice", col, order, i, b)
				}
				seen[j] = true
				if i > 0 {
					c := byColumn(col, &rows[i-1], &rows[i])
					if order == "desc" {
						c = -c
					}
					if c > 0 || c == 0 && j < prev {
						t.Fatalf("%s %s: row %d out of order after row %d", col, order, i, i-1)
					}
				}
				prev = j
			}
		}
	}
	a := get(url.Values{})
	if len(a.Flows) != min(len(flows), DefaultFlowRows) || a.Total != len(flows) {
		t.Errorf("default page: %d rows, total %d", len(a.Flows), a.Total)
	}
	var nf int64
	var nb uint64
	for i := range a.Chart.Flows {
		nf, nb = nf+a.Chart.Flows[i], nb+a.Chart.Bytes[i]
	}
	if nf != int64(len(flows)) || nb != bytes || len(a.Chart.Flows) > chartBuckets+1 {
		t.Errorf("chart: %d flows, %d bytes in %d buckets; Run: %d flows, %d bytes", nf, nb, len(a.Chart.Flows), len(flows), bytes)
	}
	for _, q := range []string{"sort=evil", "order=up", "offset=-1", "offset=x", "limit=0", "limit=1001", "sort=bytes&sort=first", "limit=5&limit=6"} {
		resp, body := fx.get(t, "/api/flows?"+q, cookie)
		name, _, _ := strings.Cut(q, "=")
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), name) {
			t.Errorf("GET /api/flows?%s: %s %s; want 400 naming %s", q, resp.Status, body, name)
		}
	}
}
