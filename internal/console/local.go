package console

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/pcapsync/pcapsync/internal/flowquery"
	"github.com/pcapsync/pcapsync/internal/layout"
	"github.com/pcapsync/pcapsync/internal/pktline"
	"github.com/pcapsync/pcapsync/internal/query"
	"github.com/pcapsync/pcapsync/internal/queryhttp"
	"github.com/pcapsync/pcapsync/internal/timeline"
)

// local is the Source of one output root: the process's own (a
// collector's or writer's --console-listen).
type local struct {
	dir    string
	status func() any // Config.Status
	log    *slog.Logger
}

func (l *local) failed(what string, err error) Answer {
	l.log.Warn("console: "+what+" failed", "err", err)
	return Answer{http.StatusInternalServerError, map[string]string{"error": what + " failed: " + l.public(err)}}
}

// public is err's text without the root's path.
func (l *local) public(err error) string {
	return strings.ReplaceAll(err.Error(), strings.TrimSuffix(l.dir, "/")+"/", "")
}

// Agent is one agent of GET /api/agents: the process's status of it
// (metrics.AgentStatus as JSON; null for an agent it does not know,
// one the root keeps from before) and what the root keeps of it
// (query.AgentCoverage; null for an agent connected that wrote
// nothing yet). Server is the server that keeps it (HOST:PORT) in a
// federated console, empty in a server's own.
type Agent struct {
	Name     string               `json:"name"`
	Server   string               `json:"server,omitempty"`
	Status   json.RawMessage      `json:"status"`
	Coverage *query.AgentCoverage `json:"coverage"`
}

// Agents is the answer of GET /api/agents. Servers, in a federated
// console, is each server's outcome (those down have no agents).
type Agents struct {
	Time      time.Time `json:"time"`
	HasStatus bool      `json:"has_status"`
	Agents    []Agent   `json:"agents"`
	Error     string    `json:"coverage_error,omitempty"`
	Servers   []Server  `json:"servers,omitempty"`
}

// Agents answers GET /api/agents.
func (l *local) Agents(ctx context.Context) Answer {
	out := Agents{Time: time.Now().UTC(), Agents: []Agent{}}
	byName := map[string]int{}
	if l.status != nil {
		out.HasStatus = true
		var st struct {
			Agents []json.RawMessage `json:"agents"`
		}
		b, err := json.Marshal(l.status())
		if err == nil {
			err = json.Unmarshal(b, &st)
		}
		if err != nil {
			return l.failed("status", err)
		}
		for _, a := range st.Agents {
			var n struct {
				Name string `json:"name"`
			}
			json.Unmarshal(a, &n)
			byName[n.Name] = len(out.Agents)
			out.Agents = append(out.Agents, Agent{Name: n.Name, Status: a})
		}
	}
	cov, err := coverage(ctx, l.dir)
	if err != nil {
		out.Error = l.public(err)
	}
	for i := range cov {
		c := &cov[i]
		if j, ok := byName[c.Agent]; ok {
			out.Agents[j].Coverage = c
			continue
		}
		out.Agents = append(out.Agents, Agent{Name: c.Agent, Status: json.RawMessage("null"), Coverage: c})
	}
	return ok(out)
}

// coverage is every agent's coverage in dir: a query of one packet per
// the root's agents, whose Result covers all of them.
func coverage(ctx context.Context, dir string) ([]query.AgentCoverage, error) {
	names, err := layout.Agents(dir)
	if err != nil || len(names) == 0 {
		return nil, err
	}
	q, err := query.Prepare(ctx, query.Config{Dir: dir, Count: 1})
	if err != nil {
		return nil, err
	}
	res, err := q.Each(ctx, func(*query.Packet) error { return nil })
	return res.Coverage, err
}

// Flows answers GET /api/flows: the flows of a selection (GET /flows's
// parameters), the top talkers, conversations and services by bytes,
// and what the selection covers.
func (l *local) Flows(ctx context.Context, v url.Values) Answer {
	pg, err := pageParams(v)
	if err != nil {
		return badRequest(err)
	}
	fc, err := queryhttp.ParseFlows(v, l.dir, time.Now())
	if err != nil {
		return badRequest(err)
	}
	fc.Logger = l.log
	// One pass over the flows as they are read (flowStream): no join of
	// every flow into a slice, no sort of them all.
	st, err := newFlowStream(pg)
	if err != nil {
		return l.failed("top lists", err)
	}
	res, err := flowquery.Each(ctx, fc, st.add)
	switch {
	case errors.Is(err, flowquery.ErrBadFilter), errors.Is(err, flowquery.ErrConfig), errors.Is(err, flowquery.ErrTooManyFlows):
		return badRequest(errors.New(l.public(err)))
	case err != nil:
		return l.failed("flows", err)
	}
	page, total, chart, tops := st.answer()
	return ok(map[string]any{"flows": page, "total": total, "page": pg, "chart": chart,
		"top_talkers": tops["top_talkers"], "top_conversations": tops["top_conversations"],
		"top_services": tops["top_services"], "coverage": flowCoverage(res, l.public)})
}

// topLists are the top talkers, conversations and services of flows by
// bytes, TopTalkers of each, by their answer's key.
func topLists(flows []flowquery.Flow) (map[string][]flowquery.Talker, error) {
	tops, err := newTops()
	if err != nil {
		return nil, err
	}
	for i := range flows {
		for _, t := range tops {
			t.Add(&flows[i])
		}
	}
	return talkers(tops), nil
}

// flowCoverage is what a flows answer covers and misses, in words the
// page shows as they are.
func flowCoverage(res flowquery.Result, public func(error) string) map[string]any {
	c := map[string]any{"agents": res.Agents, "files": res.Files, "flows": res.Flows,
		"missing": res.Missing, "writing": res.Writing, "times_unknown": res.TimesUnknown, "damaged": []string{}}
	if res.Kept.OK {
		c["oldest"] = time.Unix(0, res.Kept.Min).UTC()
		c["newest"] = time.Unix(0, res.Kept.Max).UTC()
	}
	var dmg []string
	for _, d := range res.Damaged {
		dmg = append(dmg, public(errors.New(d)))
	}
	if dmg != nil {
		c["damaged"] = dmg
	}
	return c
}

// preparedQuery is packetQuery for a request: a bad selection answered
// 400, a failure to prepare 500, in the Answer then.
func (l *local) preparedQuery(ctx context.Context, v url.Values) (*query.Prepared, *Answer) {
	q, err := l.packetQuery(ctx, v)
	switch {
	case errors.Is(err, queryhttp.ErrBadRequest):
		a := badRequest(err)
		return nil, &a
	case err != nil:
		a := l.failed("query", err)
		return nil, &a
	}
	return q, nil
}

// packetQuery reads a selection of GET /query's parameters, a
// community_id's blocks found as GET /query finds them.
func (l *local) packetQuery(ctx context.Context, v url.Values) (*query.Prepared, error) {
	cfg, err := queryhttp.ParseQuery(v, l.dir, time.Now())
	if err != nil {
		return nil, err
	}
	cfg.Logger = l.log
	if cfg.CommunityID != "" {
		if cfg.Blocks, err = flowquery.Blocks(ctx, cfg); err != nil {
			return nil, fmt.Errorf("%w: %w", queryhttp.ErrBadRequest, err)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, queryhttp.DefaultCompileTimeout) // as the query listener bounds a compile
	q, err := query.Prepare(cctx, cfg)
	cancel()
	if errors.Is(err, query.ErrBadFilter) {
		return nil, fmt.Errorf("%w: %w", queryhttp.ErrBadRequest, err)
	}
	return q, err
}

// Packets answers GET /api/packets: the first count packets of a
// selection as pktline's lines, with the query's Result (its
// coverage).
func (l *local) Packets(ctx context.Context, v url.Values) Answer {
	q, bad := l.preparedQuery(ctx, v)
	if bad != nil {
		return *bad
	}
	lines := []string{}
	var buf []byte
	res, err := q.Each(ctx, func(p *query.Packet) error {
		buf = pktline.AppendLine(buf[:0], &pktline.Packet{Timestamp: p.Timestamp, Iface: p.Interface.Name,
			LinkType: p.Interface.LinkType, OrigLen: p.OrigLen, Data: p.Data}, time.UTC)
		lines = append(lines, string(buf))
		return nil
	})
	out := map[string]any{"lines": lines, "result": res}
	if err != nil {
		out["error"] = l.public(err)
	}
	return ok(out)
}

// Packet answers GET /api/packet: the index-th packet of a selection:
// its line and its captured bytes as a hex dump (encoding/hex.Dump:
// offset, 16 bytes in hex, their printable characters).
func (l *local) Packet(ctx context.Context, v url.Values, i int64) Answer {
	q, bad := l.preparedQuery(ctx, v)
	if bad != nil {
		return *bad
	}
	var n int64
	out := map[string]any{}
	res, err := q.Each(ctx, func(p *query.Packet) error {
		if n == i {
			packetBody(out, p)
		}
		n++
		return nil
	})
	if err != nil {
		return l.failed("query", err)
	}
	if n <= i {
		return Answer{http.StatusNotFound, map[string]any{"error": fmt.Sprintf("the selection has %d packets, no packet %d", n, i), "result": res}}
	}
	return ok(out)
}

// packetBody sets GET /api/packet's fields of p in out.
func packetBody(out map[string]any, p *query.Packet) {
	out["line"] = string(pktline.AppendLine(nil, &pktline.Packet{Timestamp: p.Timestamp, Iface: p.Interface.Name,
		LinkType: p.Interface.LinkType, OrigLen: p.OrigLen, Data: p.Data}, time.UTC))
	out["hex"] = hex.Dump(p.Data)
	out["captured"], out["length"] = len(p.Data), p.OrigLen
}

// Download prepares GET /api/download: the selection's pcapng as
// GET /query streams it (query.Prepared.Run, the coverage in its
// section comment), for Wireshark.
func (l *local) Download(ctx context.Context, v url.Values) (func(io.Writer) error, Answer) {
	q, bad := l.preparedQuery(ctx, v)
	if bad != nil {
		return nil, *bad
	}
	return func(w io.Writer) error {
		if _, err := q.Run(ctx, w); err != nil {
			return errors.New(l.public(err))
		}
		return nil
	}, Answer{}
}

// Timeline answers GET /api/timeline (docs/console.md, Timeline).
func (l *local) Timeline(ctx context.Context, v url.Values) Answer {
	pats, since, until, step, err := queryhttp.ParseTimeline(v, l.dir, time.Now())
	if err != nil {
		return badRequest(err)
	}
	t, err := timeline.BuildTimeline(ctx, l.dir, pats, since, until, step)
	if err != nil {
		t.Coverage.Error = l.public(err)
	}
	for i, n := range t.Coverage.Named {
		t.Coverage.Named[i] = l.public(errors.New(n))
	}
	return ok(t)
}
