package console

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/pcapsync/pcapsync/internal/queryhttp"
)

// Source is what the console reads: one output root (the local source,
// Config.Dir) or the query listeners of several servers (NewFederated).
// Each method answers one API request, its parameters read and checked
// by the source (GET /query's, GET /flows's, the timeline's), as an
// Answer the Handler writes as JSON. A Source is safe for concurrent
// use.
type Source interface {
	// Agents answers GET /api/agents.
	Agents(ctx context.Context) Answer
	// Flows answers GET /api/flows: the flows of the selection v, the
	// top talkers, conversations and services, the coverage.
	Flows(ctx context.Context, v url.Values) Answer
	// Packets answers GET /api/packets: the first v["count"] packets
	// (set, checked) of the selection as lines, with the coverage.
	Packets(ctx context.Context, v url.Values) Answer
	// Packet answers GET /api/packet: the selection's i-th packet (v's
	// count is i+1), its line and its bytes in hex.
	Packet(ctx context.Context, v url.Values, i int64) Answer
	// Download prepares GET /api/download: run writes the selection's
	// pcapng, the coverage in its section comment; nil run: the request
	// is answered with the Answer instead (a bad selection, a failure).
	Download(ctx context.Context, v url.Values) (run func(io.Writer) error, refused Answer)
	// Timeline answers GET /api/timeline.
	Timeline(ctx context.Context, v url.Values) Answer
	// Flow answers GET /api/flow: one Community ID's records at every
	// agent and what was lost between them.
	Flow(ctx context.Context, v url.Values) Answer
	// Markers answers GET /api/markers: where capture stopped, and the
	// status's connects and disconnects, over the timeline's range.
	Markers(ctx context.Context, v url.Values) Answer
}

// Answer is a Source's answer to one API request: its HTTP status and
// its JSON body.
type Answer struct {
	Code int
	Body any
}

// ok is a 200 with body.
func ok(body any) Answer { return Answer{http.StatusOK, body} }

// badRequest is a 400 with err's text, without queryhttp.ErrBadRequest's
// prefix.
func badRequest(err error) Answer {
	msg := strings.TrimPrefix(err.Error(), queryhttp.ErrBadRequest.Error()+": ")
	return Answer{http.StatusBadRequest, map[string]string{"error": msg}}
}
