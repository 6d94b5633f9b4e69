package console

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"time"

	"github.com/pcapsync/pcapsync/internal/correlate"
	"github.com/pcapsync/pcapsync/internal/flowquery"
	"github.com/pcapsync/pcapsync/internal/query"
	"github.com/pcapsync/pcapsync/internal/queryhttp"
)

// FlowDetail is the answer of GET /api/flow: one conversation (a
// Community ID) as every agent of the selection saw it, and what was
// lost between them.
type FlowDetail struct {
	CommunityID string `json:"community_id"`
	// Seen is every flow record of the Community ID in the selection
	// (pcapsync flows --same's group): an agent and interface each,
	// several for a flow split by an idle timeout.
	Seen []flowquery.JSON `json:"seen"`
	// Agents are the agents that saw it, in the order of their first
	// record.
	Agents []string `json:"agents"`
	// Correlation is pcapsync correlate over the flow's packets between
	// Agents (in that order), null when fewer than two saw it.
	Correlation *correlate.Report `json:"correlation"`
	// CorrelateError says why the correlation failed, if it did.
	CorrelateError string `json:"correlate_error,omitempty"`
	// Packets and Download are the console's links to the flow's
	// packets page and its pcapng (the selection and the Community ID).
	Packets  string         `json:"packets"`
	Download string         `json:"download"`
	Coverage map[string]any `json:"coverage"`
}

// Flow answers GET /api/flow: community_id (required) and the
// selection of GET /api/packets (agent, iface, since, until; no
// filter, count or max_bytes), read by queryhttp.ParseQuery.
func (l *local) Flow(ctx context.Context, v url.Values) Answer {
	if a := flowArgs(v); a != nil {
		return *a
	}
	link := v.Encode()
	cfg, err := queryhttp.ParseQuery(v, l.dir, time.Now())
	if err != nil {
		return badRequest(err)
	}
	cfg.Logger = l.log
	fc := flowquery.Config{Dir: cfg.Dir, Agents: cfg.Agents, Ifaces: cfg.Ifaces, Since: cfg.Since, Until: cfg.Until,
		CommunityID: cfg.CommunityID, Logger: l.log}
	flows, res, err := flowquery.Run(ctx, fc)
	switch {
	case errors.Is(err, flowquery.ErrConfig), errors.Is(err, flowquery.ErrTooManyFlows):
		return badRequest(errors.New(l.public(err)))
	case err != nil:
		return l.failed("flows", err)
	}
	d := FlowDetail{CommunityID: cfg.CommunityID, Seen: []flowquery.JSON{}, Agents: []string{},
		Packets: "/packets?" + link, Download: "/api/download?" + link, Coverage: flowCoverage(res, l.public)}
	for i := range flows {
		d.Seen = append(d.Seen, flows[i].JSON())
		if !slices.Contains(d.Agents, flows[i].Agent) {
			d.Agents = append(d.Agents, flows[i].Agent)
		}
	}
	if len(d.Agents) >= 2 {
		rep, err := correlateFlow(ctx, cfg, d.Agents)
		if err != nil {
			d.CorrelateError = l.public(err)
		} else {
			d.Correlation = &rep
		}
	}
	return ok(d)
}

// correlateFlow is pcapsync correlate --agent agents over the packets
// of cfg's Community ID (its blocks found as query --community-id
// finds them): each pair's packets seen at one and never at the other.
func correlateFlow(ctx context.Context, cfg query.Config, agents []string) (correlate.Report, error) {
	cfg.Agents = agents
	var err error
	if cfg.Blocks, err = flowquery.Blocks(ctx, cfg); err != nil {
		return correlate.Report{}, err
	}
	q, err := query.Prepare(ctx, cfg)
	if err != nil {
		return correlate.Report{}, err
	}
	return correlate.RunSource(ctx, correlate.Config{Agents: agents, Ifaces: cfg.Ifaces, Since: cfg.Since, Until: cfg.Until}, q, nil)
}
