package queryhttp

import (
	"fmt"
	"net/http"
	"sync/atomic"
)

// Counters count a Server's requests by result, and what it served.
// Safe for concurrent use.
type Counters struct {
	Active    atomic.Int64 // queries running now
	Compiling atomic.Int64 // admitted queries compiling their filter, or waiting to

	OK           atomic.Uint64 // queries that ran to their end (or limit)
	Failed       atomic.Uint64 // queries that failed on the server (a file gone, a read error, shutdown)
	Canceled     atomic.Uint64 // queries whose client went away
	BadRequest   atomic.Uint64 // 400: a bad parameter (also 404, 405)
	Unauthorized atomic.Uint64 // 401: no client certificate, no token
	Forbidden    atomic.Uint64 // 403: a certificate refused, a wrong token, plain HTTP where TLS is required
	Busy         atomic.Uint64 // 503: MaxQueries running, or the filter not compiled within CompileTimeout
	TLS          atomic.Uint64 // TLS handshakes that failed

	Packets atomic.Uint64 // packets of the queries' outputs
	Bytes   atomic.Uint64 // pcapng bytes sent
}

// Result is one value of the result label of the requests counter.
type Result struct {
	Name string
	N    *atomic.Uint64
}

// Results returns the requests counters with their result labels
// (pcapsync_query_requests_total{result=...}).
func (c *Counters) Results() []Result {
	return []Result{{"ok", &c.OK}, {"failed", &c.Failed}, {"canceled", &c.Canceled},
		{"bad_request", &c.BadRequest}, {"unauthorized", &c.Unauthorized}, {"forbidden", &c.Forbidden},
		{"busy", &c.Busy}, {"tls", &c.TLS}}
}

// result returns the counter of a refusal's status.
func (c *Counters) result(code int) *atomic.Uint64 {
	switch code {
	case http.StatusUnauthorized:
		return &c.Unauthorized
	case http.StatusForbidden:
		return &c.Forbidden
	case http.StatusServiceUnavailable:
		return &c.Busy
	}
	return &c.BadRequest
}

// Summary is what a Server served, for the collector's closing lines.
type Summary struct {
	Served   uint64 `json:"served"`   // ran to their end
	Failed   uint64 `json:"failed"`   // failed on the server
	Canceled uint64 `json:"canceled"` // the client went away
	Refused  uint64 `json:"refused"`  // 400, 401, 403, 503, TLS
	Packets  uint64 `json:"packets"`  // packets sent
	Bytes    uint64 `json:"bytes"`    // pcapng bytes sent
}

// Summary returns the counters now; final once Run returned.
func (s *Server) Summary() Summary {
	c := &s.Counters
	return Summary{Served: c.OK.Load(), Failed: c.Failed.Load(), Canceled: c.Canceled.Load(),
		Refused: c.BadRequest.Load() + c.Unauthorized.Load() + c.Forbidden.Load() + c.Busy.Load() + c.TLS.Load(),
		Packets: c.Packets.Load(), Bytes: c.Bytes.Load()}
}

// String renders s as the query listener's line of the summary.
func (s Summary) String() string {
	return fmt.Sprintf("queries served %d, failed %d, canceled %d, refused %d, packets sent %d, bytes sent %d",
		s.Served, s.Failed, s.Canceled, s.Refused, s.Packets, s.Bytes)
}
