package queryhttp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/pcapsync/pcapsync/internal/flowquery"
	"github.com/pcapsync/pcapsync/internal/query"
)

// FlowsPath is the URL path of the flows: GET /flows.
const FlowsPath = "/flows"

// FlowsType is the media type of GET /flows's answer: one JSON object
// (flowquery.JSON) per line.
const FlowsType = "application/x-ndjson"

// flowParams are the parameters of GET /flows.
var flowParams = []string{"agent", "iface", "since", "until", "filter", "community_id"}

// parseFlows reads the parameters of GET /flows into a flowquery.Config
// over dir, as parseQuery reads GET /query's (the same names, lists,
// bounds and checks, community_id's included: the flows of that
// Community ID only; no count or max_bytes). Every error wraps
// ErrBadRequest.
func parseFlows(v url.Values, dir string, now time.Time) (flowquery.Config, error) {
	var fc flowquery.Config
	for k := range v {
		if !slices.Contains(flowParams, k) {
			return fc, fmt.Errorf("%w: unknown parameter %q (want %s)", ErrBadRequest, k, strings.Join(flowParams, ", "))
		}
	}
	cfg, err := parseQuery(v, dir, now)
	if err != nil {
		return fc, err
	}
	return flowquery.Config{Dir: cfg.Dir, Agents: cfg.Agents, Ifaces: cfg.Ifaces, Since: cfg.Since, Until: cfg.Until, Filter: cfg.Filter,
		CommunityID: cfg.CommunityID}, nil
}

// serveFlows selects the flows within the request's life, the filter
// compiled within CompileTimeout, and writes them as JSON lines.
func (s *Server) serveFlows(w http.ResponseWriter, r *http.Request, fc flowquery.Config, log *slog.Logger) {
	c := &s.Counters
	c.Active.Add(1)
	defer c.Active.Add(-1)
	fc.Logger = log
	if fc.Filter != "" { // compiled once here within the timeout, as a query's
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.CompileTimeout)
		_, err := query.Prepare(ctx, query.Config{Dir: fc.Dir, Filter: fc.Filter})
		cancel()
		if errors.Is(err, query.ErrBadFilter) {
			s.refuse(w, log, http.StatusBadRequest, err.Error())
			return
		}
	}
	start := time.Now()
	flows, res, err := flowquery.Run(r.Context(), fc)
	switch {
	case errors.Is(err, flowquery.ErrBadFilter), errors.Is(err, flowquery.ErrConfig), errors.Is(err, flowquery.ErrTooManyFlows):
		s.refuse(w, log, http.StatusBadRequest, strings.TrimPrefix(s.public(err), ErrBadRequest.Error()+": "))
		return
	case err != nil:
		c.Failed.Add(1)
		log.Warn("flows failed", "err", err)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintln(w, s.public(err))
		return
	}
	h := w.Header()
	h.Set("Content-Type", FlowsType)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Trailer", TrailerResult)
	out := &streamWriter{w: w, rc: http.NewResponseController(w), timeout: s.cfg.WriteTimeout, sent: &c.Bytes}
	bw := bufio.NewWriterSize(out, 64<<10)
	enc := json.NewEncoder(bw)
	for i := range flows {
		if err = enc.Encode(flows[i].JSON()); err != nil {
			break
		}
	}
	if err == nil {
		err = bw.Flush()
	}
	attrs := []any{"flows", len(flows), "files", res.Files, "damaged", len(res.Damaged), "duration", time.Since(start).Round(time.Millisecond)}
	if err != nil {
		c.Canceled.Add(1)
		log.Info("flows canceled: the client went away", append(attrs, "err", err)...)
		return
	}
	if b, jerr := json.Marshal(s.flowsResult(fc, res, len(flows))); jerr == nil {
		h.Set(TrailerResult, string(b))
	}
	c.OK.Add(1)
	log.Info("flows served", attrs...)
}

// FlowsResult is GET /flows's result, sent after the flows in the
// trailer Pcapsync-Result: flowquery's summary of the selection, its
// Uncovered without the server's paths.
type FlowsResult = flowquery.Summary

// MaxFlowsResult bounds the Pcapsync-Result trailer FetchFlows reads.
const MaxFlowsResult = 4 << 10

// flowsResult is the trailer of the flows selected by fc: res and the
// n flows sent.
func (s *Server) flowsResult(fc flowquery.Config, res flowquery.Result, n int) FlowsResult {
	r := flowquery.Summarize(fc, res, n)
	if r.Uncovered != "" {
		msg := strings.Replace(r.Uncovered, "no agent of "+fc.Dir+" ", "no agent of the root ", 1)
		if msg = s.public(errors.New(msg)); len(msg) > MaxFlowsResult/2 {
			msg = strings.ToValidUTF8(msg[:MaxFlowsResult/2], "") + "..."
		}
		r.Uncovered = msg
	}
	return r
}
