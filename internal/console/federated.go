package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pcapsync/pcapsync/internal/federate"
	"github.com/pcapsync/pcapsync/internal/frontdoor"
	"github.com/pcapsync/pcapsync/internal/query"
	"github.com/pcapsync/pcapsync/internal/queryhttp"
)

// maxParallel bounds the servers a federated console asks at once.
const maxParallel = 16

// errStalled is the cause of a server's request ended by its deadline.
var errStalled = errors.New("stalled")

// FederatedConfig configures NewFederated.
type FederatedConfig struct {
	// Servers are the query listeners asked (Addr, TLS, Token,
	// DialTimeout; the Params are each request's). At least one.
	Servers []queryhttp.ClientConfig
	// Timeout is how long a server may send nothing before it is
	// shown down (federate.Config.Timeout); 0 means
	// federate.DefaultServerTimeout.
	Timeout time.Duration
	Logger  *slog.Logger // nil: slog.Default()
}

// Server is one server's outcome in a federated console's answer
// (federate's outcomes: ok, refused, unreachable, timed out, failed).
type Server struct {
	Server  string `json:"server"`
	Outcome string `json:"outcome"`
	Reason  string `json:"reason,omitempty"`
}

// federated is the Source of a console over several servers' query
// listeners, a client of them (pcapsync console --from): each API
// request asks every server at once (GET /status and one packet's
// query for the agents, GET /flows, GET /query through
// internal/federate, GET /timeline) and merges what they answer; a
// server that fails is in the answer's servers, the others answer.
type federated struct {
	cfg  FederatedConfig
	log  *slog.Logger
	down frontdoor.RateLog // one line per interval for each server down
}

// Validate reports the first unusable setting.
func (c FederatedConfig) Validate() error {
	switch {
	case len(c.Servers) == 0:
		return fmt.Errorf("%w: no server to ask", ErrConfig)
	case c.Timeout < 0:
		return fmt.Errorf("%w: server timeout %s is negative", ErrConfig, c.Timeout)
	}
	return nil
}

// NewFederated validates cfg and returns the Source of a console over
// its servers.
func NewFederated(cfg FederatedConfig) (Source, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = federate.DefaultServerTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &federated{cfg: cfg, log: cfg.Logger}, nil
}

// each asks every server at once (at most maxParallel), each under
// its deadline (alive restarts it: a server that keeps sending is not
// given up), and returns their outcomes in order.
func (f *federated) each(ctx context.Context, ask func(ctx context.Context, i int, alive func()) error) []Server {
	out := make([]Server, len(f.cfg.Servers))
	sem := make(chan struct{}, maxParallel)
	var wg sync.WaitGroup
	for i, cc := range f.cfg.Servers {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			cctx, cancel := context.WithCancelCause(ctx)
			defer cancel(nil)
			t := time.AfterFunc(f.cfg.Timeout, func() { cancel(errStalled) })
			defer t.Stop()
			err := ask(cctx, i, func() { t.Reset(f.cfg.Timeout) })
			out[i] = Server{Server: cc.Addr, Outcome: federate.OutcomeOK}
			switch {
			case err == nil:
			case errors.Is(context.Cause(cctx), errStalled):
				out[i].Outcome, out[i].Reason = federate.OutcomeTimedOut, fmt.Sprintf("sent nothing for %s", f.cfg.Timeout)
			default:
				out[i].Outcome, out[i].Reason = federate.OutcomeOf(err), oneLine(err)
			}
		})
	}
	wg.Wait()
	for _, s := range out {
		if s.Outcome != federate.OutcomeOK {
			f.down.WarnKey(f.log, s.Server, "console: server down", "server", s.Server, "outcome", s.Outcome, "reason", s.Reason)
		}
	}
	return out
}

// client is server i's client configuration with params p.
func (f *federated) client(i int, p queryhttp.Params) queryhttp.ClientConfig {
	cc := f.cfg.Servers[i]
	cc.Params = p
	if cc.DialTimeout == 0 || cc.DialTimeout > f.cfg.Timeout {
		cc.DialTimeout = f.cfg.Timeout
	}
	return cc
}

// noneAnswered is the Answer when no server answered: 400 when a
// server refused the selection as bad (its reason: the selection is
// the same for all), else 502 with every server's reason.
func noneAnswered(servers []Server, errs []error) Answer {
	for i, err := range errs {
		if errors.Is(err, queryhttp.ErrBadRequest) {
			return Answer{http.StatusBadRequest, map[string]any{"error": "server " + servers[i].Server + " refused the selection: " + servers[i].Reason,
				"servers": servers}}
		}
	}
	var why []string
	for _, s := range servers {
		why = append(why, s.Server+": "+s.Outcome+": "+s.Reason)
	}
	return Answer{http.StatusBadGateway, map[string]any{"error": "no server answered: " + strings.Join(why, "; "), "servers": servers}}
}

// down reports whether no server answered.
func down(servers []Server) bool {
	for _, s := range servers {
		if s.Outcome == federate.OutcomeOK {
			return false
		}
	}
	return true
}

// oneLine is err's text on one line.
func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }

// timeParam is t as a parameter: RFC 3339 with nanoseconds, "" when
// zero.
func timeParam(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// queryParams reads v as GET /query's parameters (a bad selection
// refused here, as a server would) into the Params sent to every
// server, its times absolute (the console's clock, not each
// server's).
func queryParams(v url.Values) (queryhttp.Params, error) {
	cfg, err := queryhttp.ParseQuery(v, ".", time.Now())
	if err != nil {
		return queryhttp.Params{}, err
	}
	return queryhttp.Params{Agents: cfg.Agents, Ifaces: cfg.Ifaces, Since: timeParam(cfg.Since), Until: timeParam(cfg.Until),
		Filter: cfg.Filter, CommunityID: cfg.CommunityID, Count: cfg.Count}, nil
}

// queryResult sums the servers' Results of a federated query into one
// (Packets, Agents, files, blocks), each agent's coverage named
// "AGENT on SERVER", with fr's Stopped.
func queryResult(fr federate.Result) query.Result {
	r := query.Result{Packets: fr.Packets, Stopped: fr.Stopped, Late: fr.Late, Coverage: []query.AgentCoverage{}}
	for _, s := range fr.Servers {
		if s.Result == nil {
			continue
		}
		sr := s.Result
		r.Agents += sr.Agents
		r.FilesRead += sr.FilesRead
		r.FilesSkipped += sr.FilesSkipped
		r.BytesRead += sr.BytesRead
		r.FilesIndexed += sr.FilesIndexed
		r.FilesScanned += sr.FilesScanned
		r.BlocksRead += sr.BlocksRead
		r.BlocksSkipped += sr.BlocksSkipped
		for _, c := range sr.Coverage {
			c.Agent += " on " + s.Server
			r.Coverage = append(r.Coverage, c)
		}
	}
	return r
}

// servers are fr's servers' outcomes.
func servers(fr federate.Result) []Server {
	out := make([]Server, len(fr.Servers))
	for i, s := range fr.Servers {
		out[i] = Server{Server: s.Server, Outcome: s.Outcome, Reason: s.Reason}
	}
	return out
}

// fedConfig is the federated query of p over every server, partial.
func (f *federated) fedConfig(p queryhttp.Params, count int64, what string) federate.Config {
	cfg := federate.Config{Servers: make([]queryhttp.ClientConfig, len(f.cfg.Servers)), Timeout: f.cfg.Timeout, Partial: true,
		Count: count, Query: what}
	for i := range f.cfg.Servers {
		cfg.Servers[i] = f.client(i, p)
	}
	return cfg
}

// eachPacket runs the federated query of v (its count set) and gives
// its packets to fn; a bad selection or no server answering is the
// Answer.
func (f *federated) eachPacket(ctx context.Context, v url.Values, fn func(*query.Packet) error) (federate.Result, *Answer) {
	p, err := queryParams(v)
	if err != nil {
		a := badRequest(err)
		return federate.Result{}, &a
	}
	// Each server stops at count itself (Params.Count) and is read to
	// its end, so that its Result (the coverage) comes; the merge gives
	// fn the first count.
	var given int64
	fr, err := federate.Each(ctx, f.fedConfig(p, 0, ""), func(pk *query.Packet) error {
		if given++; given > p.Count {
			return nil
		}
		return fn(pk)
	})
	if given > p.Count {
		fr.Packets = p.Count
	}
	for _, s := range fr.Servers {
		if given > p.Count || s.Result != nil && s.Result.Stopped == "count" {
			fr.Stopped = "count" // more than shown
		}
	}
	if errors.Is(err, federate.ErrNoServer) {
		var errs []error
		for _, s := range fr.Servers {
			errs = append(errs, errors.New(s.Reason))
			if s.Outcome == federate.OutcomeRefused && strings.Contains(s.Reason, "400") {
				errs[len(errs)-1] = fmt.Errorf("%w: %s", queryhttp.ErrBadRequest, s.Reason)
			}
		}
		a := noneAnswered(servers(fr), errs)
		return fr, &a
	}
	if err != nil {
		a := Answer{http.StatusBadGateway, map[string]any{"error": "query failed: " + oneLine(err), "servers": servers(fr)}}
		return fr, &a
	}
	return fr, nil
}

// Packets answers GET /api/packets from every server, merged in time
// order (federate.Each): the lines, the servers' Results summed, the
// servers' outcomes.
func (f *federated) Packets(ctx context.Context, v url.Values) Answer {
	lines := []string{}
	fr, bad := f.eachPacket(ctx, v, func(p *query.Packet) error {
		lines = append(lines, string(pktLine(p)))
		return nil
	})
	if bad != nil {
		return *bad
	}
	return ok(map[string]any{"lines": lines, "result": queryResult(fr), "servers": servers(fr)})
}

// Packet answers GET /api/packet from every server: the i-th packet
// of their merge.
func (f *federated) Packet(ctx context.Context, v url.Values, i int64) Answer {
	var n int64
	out := map[string]any{}
	fr, bad := f.eachPacket(ctx, v, func(p *query.Packet) error {
		if n == i {
			packetBody(out, p)
		}
		n++
		return nil
	})
	if bad != nil {
		return *bad
	}
	if n <= i {
		return Answer{http.StatusNotFound, map[string]any{"error": fmt.Sprintf("the selection has %d packets, no packet %d", n, i),
			"result": queryResult(fr), "servers": servers(fr)}}
	}
	out["servers"] = servers(fr)
	return ok(out)
}

// Download prepares GET /api/download from every server: their pcapng
// merged in time order (federate.Run, as pcapsync query --from writes
// it), the servers and their coverage in the section comment, a
// server cut off marked where it was.
func (f *federated) Download(ctx context.Context, v url.Values) (func(io.Writer) error, Answer) {
	p, err := queryParams(v)
	if err != nil {
		return nil, badRequest(err)
	}
	what := "pcapsync console --from: " + p.Values().Encode()
	return func(w io.Writer) error {
		_, err := federate.Run(ctx, f.fedConfig(p, p.Count, what), w)
		return err
	}, Answer{}
}

// Agents answers GET /api/agents from every server: its status's
// agents (GET /status; a server that serves none: its root's only)
// and its root's coverage (a query of one packet), each agent with its
// server; a server down has no agents and its outcome in servers.
func (f *federated) Agents(ctx context.Context) Answer {
	per := make([][]Agent, len(f.cfg.Servers))
	hasStatus := make([]bool, len(f.cfg.Servers))
	srv := f.each(ctx, func(ctx context.Context, i int, alive func()) error {
		var err error
		per[i], hasStatus[i], err = f.serverAgents(ctx, i, alive)
		return err
	})
	out := Agents{Time: time.Now().UTC(), Agents: []Agent{}, Servers: srv}
	for i, s := range srv {
		if s.Outcome == federate.OutcomeOK {
			out.Agents = append(out.Agents, per[i]...)
			out.HasStatus = out.HasStatus || hasStatus[i]
		}
	}
	if down(srv) {
		return noneAnswered(srv, nil)
	}
	return ok(out)
}

// serverAgents is server i's agents, as the local source's Agents
// makes them of its status and root.
func (f *federated) serverAgents(ctx context.Context, i int, alive func()) ([]Agent, bool, error) {
	cc := f.client(i, queryhttp.Params{})
	var agents []Agent
	byName := map[string]int{}
	b, err := queryhttp.FetchStatus(ctx, cc)
	hasStatus := err == nil
	switch {
	case errors.Is(err, queryhttp.ErrRefused) && strings.Contains(err.Error(), "404"): // no status served
	case err != nil:
		return nil, false, err
	default:
		var st struct {
			Agents []json.RawMessage `json:"agents"`
		}
		if err := json.Unmarshal(b, &st); err != nil {
			return nil, false, fmt.Errorf("%w: status: %w", queryhttp.ErrFailed, err)
		}
		for _, a := range st.Agents {
			var n struct {
				Name string `json:"name"`
			}
			json.Unmarshal(a, &n)
			byName[n.Name] = len(agents)
			agents = append(agents, Agent{Name: n.Name, Server: cc.Addr, Status: a})
		}
	}
	alive()
	cc.Params.Count = 1
	ans, err := queryhttp.Open(ctx, cc)
	if err != nil {
		return nil, false, err
	}
	defer ans.Close()
	if _, err := io.Copy(io.Discard, ans.Body); err != nil {
		return nil, false, fmt.Errorf("%w: the stream was cut off: %w", queryhttp.ErrFailed, err)
	}
	res, err := ans.Result()
	if err != nil {
		return nil, false, err
	}
	for k := range res.Coverage {
		c := &res.Coverage[k]
		if j, ok := byName[c.Agent]; ok {
			agents[j].Coverage = c
			continue
		}
		agents = append(agents, Agent{Name: c.Agent, Server: cc.Addr, Status: json.RawMessage("null"), Coverage: c})
	}
	return agents, hasStatus, nil
}

// stepParam is d as the step parameter.
func stepParam(d time.Duration) string { return strconv.FormatInt(int64(d), 10) + "ns" }
