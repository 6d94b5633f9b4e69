package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/pcapsync/pcapsync/internal/federate"
	"github.com/pcapsync/pcapsync/internal/flowquery"
	"github.com/pcapsync/pcapsync/internal/pktline"
	"github.com/pcapsync/pcapsync/internal/query"
	"github.com/pcapsync/pcapsync/internal/queryhttp"
	"github.com/pcapsync/pcapsync/internal/timeline"
)

// pktLine is p's line as GET /api/packets lists it (pktline, UTC).
func pktLine(p *query.Packet) []byte {
	return pktline.AppendLine(nil, &pktline.Packet{Timestamp: p.Timestamp, Iface: p.Interface.Name,
		LinkType: p.Interface.LinkType, OrigLen: p.OrigLen, Data: p.Data}, time.UTC)
}

// Flows answers GET /api/flows from every server (GET /flows, as
// pcapsync flows --from asks them): their flows together, sorted by
// first time (each with its server), at most flowquery.DefaultMaxFlows
// in all (a line that is no flow left out); the top lists of them all; the coverage summed over the
// servers that answered; the servers' outcomes.
func (f *federated) Flows(ctx context.Context, v url.Values) Answer {
	pg, err := pageParams(v)
	if err != nil {
		return badRequest(err)
	}
	fc, err := queryhttp.ParseFlows(v, ".", time.Now())
	if err != nil {
		return badRequest(err)
	}
	p := queryhttp.Params{Agents: fc.Agents, Ifaces: fc.Ifaces, Since: timeParam(fc.Since), Until: timeParam(fc.Until), Filter: fc.Filter,
		CommunityID: fc.CommunityID}
	got, sums, srv, errs := f.fetchFlows(ctx, p)
	if a := tooMany(errs); a != nil {
		return *a
	}
	if down(srv) {
		return noneAnswered(srv, errs)
	}
	flows := make([]flowquery.Flow, len(got))
	for i := range got {
		flows[i] = got[i].fl
	}
	rows := pg.rows(flows)
	page := make([]flowquery.JSON, len(rows))
	for k, i := range rows {
		page[k] = got[i].j
	}
	tops, err := topLists(flows)
	if err != nil {
		return Answer{http.StatusInternalServerError, map[string]string{"error": "top lists failed: " + err.Error()}}
	}
	return ok(map[string]any{"flows": page, "total": len(flows), "page": pg, "chart": chartOf(flows), "top_talkers": tops["top_talkers"], "top_conversations": tops["top_conversations"],
		"top_services": tops["top_services"], "coverage": flowsCoverage(srv, sums), "servers": srv})
}

// flowsCoverage sums the flows results of the servers that answered
// into the coverage GET /api/flows gives (flowCoverage's fields).
func flowsCoverage(srv []Server, sums []queryhttp.FlowsResult) map[string]any {
	var agents, files, flows, missing, writing, unknown int
	var oldest, newest string
	damaged := []string{}
	for i, s := range srv {
		if s.Outcome != federate.OutcomeOK {
			continue
		}
		r := sums[i]
		agents, files, flows, missing, writing, unknown = agents+r.Agents, files+r.Files, flows+r.Flows, missing+r.NoFlows, writing+r.Writing, unknown+r.TimesUnknown
		if r.Damaged > 0 {
			damaged = append(damaged, fmt.Sprintf("%s: %d damaged flow files", s.Server, r.Damaged))
		}
		if r.Oldest != "" && (oldest == "" || r.Oldest < oldest) {
			oldest = r.Oldest
		}
		if r.Newest > newest {
			newest = r.Newest
		}
	}
	c := map[string]any{"agents": agents, "files": files, "flows": flows, "missing": missing, "writing": writing,
		"times_unknown": unknown, "damaged": damaged}
	if oldest != "" {
		c["oldest"], c["newest"] = oldest, newest
	}
	return c
}

// fedTimeline is a federated console's GET /api/timeline: the servers'
// timelines merged (timeline.Merge), the servers' outcomes.
type fedTimeline struct {
	timeline.Timeline
	Servers []Server `json:"servers"`
}

// Timeline answers GET /api/timeline from every server (GET /timeline
// of the same range and step, its times made absolute here), their
// series merged.
func (f *federated) Timeline(ctx context.Context, v url.Values) Answer {
	pats, since, until, step, err := queryhttp.ParseTimeline(v, ".", time.Now())
	if err != nil {
		return badRequest(err)
	}
	q := timelineParams(pats, since, until, step)
	parts := make([]timeline.Timeline, len(f.cfg.Servers))
	errs := make([]error, len(f.cfg.Servers))
	srv := f.each(ctx, func(ctx context.Context, i int, _ func()) error {
		parts[i], errs[i] = queryhttp.FetchTimeline(ctx, f.client(i, queryhttp.Params{}), q)
		return errs[i]
	})
	if down(srv) {
		return noneAnswered(srv, errs)
	}
	var ok2 []timeline.Timeline
	var names []string
	for i, s := range srv {
		if s.Outcome == federate.OutcomeOK {
			ok2, names = append(ok2, parts[i]), append(names, s.Server)
		}
	}
	return ok(fedTimeline{Timeline: timeline.Merge(ok2, names), Servers: srv})
}

// timelineParams are the timeline's parameters sent to every server:
// its range absolute (the console's clock), its step given, so that
// every server cuts the same intervals.
func timelineParams(pats []string, since, until time.Time, step time.Duration) url.Values {
	q := url.Values{"since": {timeParam(since)}, "until": {timeParam(until)}, "step": {stepParam(step)}}
	if len(pats) > 0 {
		q["agent"] = pats
	}
	return q
}

// fedMarkers is a federated console's GET /api/markers: the servers'
// markers together, the servers' outcomes.
type fedMarkers struct {
	timeline.Markers
	Servers []Server `json:"servers"`
}

// Markers answers GET /api/markers from every server (GET /markers, the
// same code as the local GET /api/markers, of the same range and step,
// made absolute here): their markers together, each with its server,
// by time, then agent, then server order; the files of unknown times
// summed; the errors joined, each with its server.
func (f *federated) Markers(ctx context.Context, v url.Values) Answer {
	pats, since, until, step, err := queryhttp.ParseTimeline(v, ".", time.Now())
	if err != nil {
		return badRequest(err)
	}
	q := timelineParams(pats, since, until, step)
	parts := make([]timeline.Markers, len(f.cfg.Servers))
	errs := make([]error, len(f.cfg.Servers))
	srv := f.each(ctx, func(ctx context.Context, i int, _ func()) error {
		parts[i], errs[i] = queryhttp.FetchMarkers(ctx, f.client(i, queryhttp.Params{}), q)
		return errs[i]
	})
	if down(srv) {
		return noneAnswered(srv, errs)
	}
	out := fedMarkers{Markers: timeline.Markers{Since: since.UTC(), Until: until.UTC(), Markers: []timeline.Marker{}}, Servers: srv}
	var why []string
	for i, s := range srv {
		if s.Outcome != federate.OutcomeOK {
			continue
		}
		for _, m := range parts[i].Markers {
			m.Server = s.Server
			out.Markers.Markers = append(out.Markers.Markers, m)
		}
		out.Unknown += parts[i].Unknown
		if parts[i].Error != "" {
			why = append(why, s.Server+": "+parts[i].Error)
		}
	}
	timeline.SortMarkers(out.Markers.Markers)
	out.Error = strings.Join(why, "; ")
	return ok(out)
}
