package console

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/pcapsync/pcapsync/internal/flowquery"
	"github.com/pcapsync/pcapsync/internal/layout"
	"github.com/pcapsync/pcapsync/internal/pktline"
	"github.com/pcapsync/pcapsync/internal/query"
	"github.com/pcapsync/pcapsync/internal/queryhttp"
)

// TopTalkers is how many hosts, conversations and services GET
// /api/flows ranks (flowquery.Top by bytes).
const TopTalkers = 10

// api answers GET /api/...: JSON, or the pcapng of a download.
func (h *Handler) api(w http.ResponseWriter, r *http.Request) {
	v, err := queryhttp.ParseValues(r.URL.RawQuery)
	if err != nil {
		h.bad(w, err)
		return
	}
	select {
	case h.slots <- struct{}{}:
		defer func() { <-h.slots }()
	default:
		w.Header().Set("Retry-After", "1")
		h.json(w, http.StatusServiceUnavailable, map[string]string{"error": fmt.Sprintf("too many requests reading the captures (%d): try again later", h.cfg.MaxQueries)})
		return
	}
	switch r.URL.Path {
	case "/api/agents":
		h.agents(w, r)
	case "/api/flows":
		h.flows(w, r, v)
	case "/api/packets":
		h.packets(w, r, v)
	case "/api/download":
		h.download(w, r, v)
	case "/api/packet":
		h.packet(w, r, v)
	case "/api/timeline":
		h.timeline(w, r, v)
	case "/api/flow":
		h.flowDetail(w, r, v)
	case "/api/markers":
		h.markers(w, r, v)
	default:
		http.Error(w, "no such API: GET /api/agents, /api/flows, /api/flow, /api/packets, /api/packet, /api/download, /api/timeline, /api/markers", http.StatusNotFound)
	}
}

func (h *Handler) bad(w http.ResponseWriter, err error) {
	msg := strings.TrimPrefix(err.Error(), queryhttp.ErrBadRequest.Error()+": ")
	h.json(w, http.StatusBadRequest, map[string]string{"error": msg})
}

func (h *Handler) json(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func (h *Handler) failed(w http.ResponseWriter, what string, err error) {
	h.log.Warn("console: "+what+" failed", "err", err)
	h.json(w, http.StatusInternalServerError, map[string]string{"error": what + " failed: " + h.public(err)})
}

// public is err's text without the root's path.
func (h *Handler) public(err error) string {
	return strings.ReplaceAll(err.Error(), strings.TrimSuffix(h.cfg.Dir, "/")+"/", "")
}

// Agent is one agent of GET /api/agents: the process's status of it
// (metrics.AgentStatus as JSON; null for an agent it does not know,
// one the root keeps from before) and what the root keeps of it
// (query.AgentCoverage; null for an agent connected that wrote
// nothing yet).
type Agent struct {
	Name     string               `json:"name"`
	Status   json.RawMessage      `json:"status"`
	Coverage *query.AgentCoverage `json:"coverage"`
}

// agents answers GET /api/agents.
func (h *Handler) agents(w http.ResponseWriter, r *http.Request) {
	out := struct {
		Time      time.Time `json:"time"`
		HasStatus bool      `json:"has_status"`
		Agents    []Agent   `json:"agents"`
		Error     string    `json:"coverage_error,omitempty"`
	}{Time: time.Now().UTC(), Agents: []Agent{}}
	byName := map[string]int{}
	if h.cfg.Status != nil {
		out.HasStatus = true
		var st struct {
			Agents []json.RawMessage `json:"agents"`
		}
		b, err := json.Marshal(h.cfg.Status())
		if err == nil {
			err = json.Unmarshal(b, &st)
		}
		if err != nil {
			h.failed(w, "status", err)
			return
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
	cov, err := coverage(r.Context(), h.cfg.Dir)
	if err != nil {
		out.Error = h.public(err)
	}
	for i := range cov {
		c := &cov[i]
		if j, ok := byName[c.Agent]; ok {
			out.Agents[j].Coverage = c
			continue
		}
		out.Agents = append(out.Agents, Agent{Name: c.Agent, Status: json.RawMessage("null"), Coverage: c})
	}
	h.json(w, http.StatusOK, out)
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

// flows answers GET /api/flows: the flows of a selection (GET /flows's
// parameters), the top talkers, conversations and services by bytes,
// and what the selection covers.
func (h *Handler) flows(w http.ResponseWriter, r *http.Request, v map[string][]string) {
	fc, err := queryhttp.ParseFlows(v, h.cfg.Dir, time.Now())
	if err != nil {
		h.bad(w, err)
		return
	}
	fc.Logger = h.log
	flows, res, err := flowquery.Run(r.Context(), fc)
	switch {
	case errors.Is(err, flowquery.ErrBadFilter), errors.Is(err, flowquery.ErrConfig), errors.Is(err, flowquery.ErrTooManyFlows):
		h.bad(w, errors.New(h.public(err)))
		return
	case err != nil:
		h.failed(w, "flows", err)
		return
	}
	tops := map[string][]flowquery.Talker{}
	for key, group := range map[string]string{"top_talkers": flowquery.GroupHost, "top_conversations": flowquery.GroupPair, "top_services": flowquery.GroupPort} {
		if tops[key], err = flowquery.Top(flows, group, flowquery.ByBytes, TopTalkers); err != nil {
			h.failed(w, key, err)
			return
		}
	}
	js := make([]any, len(flows))
	for i := range flows {
		js[i] = flows[i].JSON()
	}
	h.json(w, http.StatusOK, map[string]any{"flows": js, "top_talkers": tops["top_talkers"], "top_conversations": tops["top_conversations"],
		"top_services": tops["top_services"], "coverage": flowCoverage(res, h.public)})
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
// 400, a failure to prepare 500, and false then.
func (h *Handler) preparedQuery(w http.ResponseWriter, r *http.Request, v map[string][]string) (*query.Prepared, bool) {
	q, err := h.packetQuery(r.Context(), v)
	switch {
	case errors.Is(err, queryhttp.ErrBadRequest):
		h.bad(w, err)
		return nil, false
	case err != nil:
		h.failed(w, "query", err)
		return nil, false
	}
	return q, true
}

// packetQuery reads a selection of GET /query's parameters, a
// community_id's blocks found as GET /query finds them.
func (h *Handler) packetQuery(ctx context.Context, v map[string][]string) (*query.Prepared, error) {
	cfg, err := queryhttp.ParseQuery(v, h.cfg.Dir, time.Now())
	if err != nil {
		return nil, err
	}
	cfg.Logger = h.log
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

// packets answers GET /api/packets: the first count packets (default
// DefaultPackets, at most DefaultMaxPackets) of a selection as
// pktline's lines, with the query's Result (its coverage).
func (h *Handler) packets(w http.ResponseWriter, r *http.Request, v map[string][]string) {
	n := int64(DefaultPackets)
	if s := v["count"]; len(s) > 1 {
		h.bad(w, fmt.Errorf("count given %d times", len(s)))
		return
	} else if len(s) == 1 {
		var err error
		if n, err = strconv.ParseInt(s[0], 10, 64); err != nil || n < 1 || n > DefaultMaxPackets {
			h.bad(w, fmt.Errorf("count %q: want 1..%d", s[0], DefaultMaxPackets))
			return
		}
	}
	v["count"] = []string{strconv.FormatInt(n, 10)}
	q, ok := h.preparedQuery(w, r, v)
	if !ok {
		return
	}
	lines := []string{}
	var buf []byte
	res, err := q.Each(r.Context(), func(p *query.Packet) error {
		buf = pktline.AppendLine(buf[:0], &pktline.Packet{Timestamp: p.Timestamp, Iface: p.Interface.Name,
			LinkType: p.Interface.LinkType, OrigLen: p.OrigLen, Data: p.Data}, time.UTC)
		lines = append(lines, string(buf))
		return nil
	})
	out := map[string]any{"lines": lines, "result": res}
	if err != nil {
		out["error"] = h.public(err)
	}
	h.json(w, http.StatusOK, out)
}

// packet answers GET /api/packet: the index-th packet (from 0, below
// DefaultMaxPackets) of a selection (GET /api/packets's, no count): its
// line and its captured bytes as a hex dump (encoding/hex.Dump: offset,
// 16 bytes in hex, their printable characters).
func (h *Handler) packet(w http.ResponseWriter, r *http.Request, v map[string][]string) {
	s := v["index"]
	i, err := int64(0), error(nil)
	if len(s) == 1 {
		i, err = strconv.ParseInt(s[0], 10, 64)
	}
	if len(s) != 1 || err != nil || i < 0 || i >= DefaultMaxPackets {
		h.bad(w, fmt.Errorf("index: want one whole number 0..%d", DefaultMaxPackets-1))
		return
	}
	delete(v, "index")
	if _, ok := v["count"]; ok {
		h.bad(w, errors.New("count: GET /api/packet takes index, not count"))
		return
	}
	v["count"] = []string{strconv.FormatInt(i+1, 10)}
	q, ok := h.preparedQuery(w, r, v)
	if !ok {
		return
	}
	var n int64
	out := map[string]any{}
	res, err := q.Each(r.Context(), func(p *query.Packet) error {
		if n == i {
			out["line"] = string(pktline.AppendLine(nil, &pktline.Packet{Timestamp: p.Timestamp, Iface: p.Interface.Name,
				LinkType: p.Interface.LinkType, OrigLen: p.OrigLen, Data: p.Data}, time.UTC))
			out["hex"] = hex.Dump(p.Data)
			out["captured"], out["length"] = len(p.Data), p.OrigLen
		}
		n++
		return nil
	})
	if err != nil {
		h.failed(w, "query", err)
		return
	}
	if n <= i {
		h.json(w, http.StatusNotFound, map[string]any{"error": fmt.Sprintf("the selection has %d packets, no packet %d", n, i), "result": res})
		return
	}
	h.json(w, http.StatusOK, out)
}

// download answers GET /api/download: the selection's pcapng as
// GET /query streams it (query.Prepared.Run, the coverage in its
// section comment), for Wireshark.
func (h *Handler) download(w http.ResponseWriter, r *http.Request, v map[string][]string) {
	q, ok := h.preparedQuery(w, r, v)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", queryhttp.ContentType)
	w.Header().Set("Content-Disposition", `attachment; filename="pcapsync-query.pcapng"`)
	dw := &deadlineWriter{w: w, rc: http.NewResponseController(w)}
	if _, err := q.Run(r.Context(), dw); err != nil {
		h.log.Warn("console download failed", "err", err)
	}
}

// deadlineWriter writes a download with a deadline renewed before each
// write: a client that takes nothing for queryhttp.DefaultWriteTimeout
// is cut off (its slot freed), a slow one that keeps taking is not.
type deadlineWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (d *deadlineWriter) Write(p []byte) (int, error) {
	d.rc.SetWriteDeadline(time.Now().Add(queryhttp.DefaultWriteTimeout))
	return d.w.Write(p)
}
