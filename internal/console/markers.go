package console

import (
	"context"
	"net/url"
	"time"

	"github.com/pcapsync/pcapsync/internal/queryhttp"
	"github.com/pcapsync/pcapsync/internal/timeline"
)

// The markers' kinds and types are internal/timeline's (the query
// listener's GET /markers computes them by the same code).
const (
	MarkStop       = timeline.MarkStop
	MarkDisconnect = timeline.MarkDisconnect
	MarkConnect    = timeline.MarkConnect
)

// Marker is one event on a timeline (timeline.Marker).
type Marker = timeline.Marker

// Markers is the answer of GET /api/markers (timeline.Markers).
type Markers = timeline.Markers

// Markers answers GET /api/markers: the timeline's parameters (agent,
// since, until, step), the markers of its range by time, then agent.
func (l *local) Markers(ctx context.Context, v url.Values) Answer {
	pats, since, until, step, err := queryhttp.ParseTimeline(v, l.dir, time.Now())
	if err != nil {
		return badRequest(err)
	}
	m, err := timeline.BuildMarkers(ctx, l.dir, pats, since, until, step)
	if err != nil {
		m.Error = l.public(err)
	}
	if l.status != nil {
		m.Markers = append(m.Markers, timeline.StatusMarkers(l.status(), pats, since, until)...)
	}
	timeline.SortMarkers(m.Markers)
	return ok(m)
}
