package console

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pcapsync/pcapsync/internal/correlate"
	"github.com/pcapsync/pcapsync/internal/federate"
	"github.com/pcapsync/pcapsync/internal/flowquery"
	"github.com/pcapsync/pcapsync/internal/query"
	"github.com/pcapsync/pcapsync/internal/queryhttp"
)

// fedFlow is a flow record a server answered, decoded, with its JSON
// (its server set).
type fedFlow struct {
	j  flowquery.JSON
	fl flowquery.Flow
}

// fetchFlows asks every server's GET /flows for the flows of p, at
// most flowquery.DefaultMaxFlows in all, and returns those of the
// servers that answered sorted as flowquery.Run sorts them (first
// time, agent, interface), then by server order; their results; the
// servers' outcomes and errors. A line that is no flow is left out.
func (f *federated) fetchFlows(ctx context.Context, p queryhttp.Params) ([]fedFlow, []queryhttp.FlowsResult, []Server, []error) {
	per := make([][]flowquery.JSON, len(f.cfg.Servers))
	sums := make([]queryhttp.FlowsResult, len(f.cfg.Servers))
	errs := make([]error, len(f.cfg.Servers))
	var mu sync.Mutex
	held := 0
	srv := f.each(ctx, func(ctx context.Context, i int, alive func()) error {
		sums[i], errs[i] = queryhttp.FetchFlows(ctx, f.client(i, p), func(j *flowquery.JSON) error {
			alive()
			mu.Lock()
			held++
			n := held
			mu.Unlock()
			if n > flowquery.DefaultMaxFlows {
				return fmt.Errorf("%w: more than %d flows from the servers together: narrow the selection", flowquery.ErrTooManyFlows, flowquery.DefaultMaxFlows)
			}
			j.Server = f.cfg.Servers[i].Addr
			per[i] = append(per[i], *j)
			return nil
		})
		return errs[i]
	})
	var got []fedFlow
	for i, s := range srv {
		if s.Outcome != federate.OutcomeOK {
			continue
		}
		for _, j := range per[i] {
			if fl, err := j.Flow(); err == nil {
				got = append(got, fedFlow{j, fl})
			}
		}
	}
	slices.SortStableFunc(got, func(a, b fedFlow) int {
		return cmp.Or(cmp.Compare(a.fl.First, b.fl.First), strings.Compare(a.fl.Agent, b.fl.Agent), strings.Compare(a.fl.Iface, b.fl.Iface))
	})
	return got, sums, srv, errs
}

// tooMany is the 400 when errs hold flowquery.ErrTooManyFlows.
func tooMany(errs []error) *Answer {
	for _, err := range errs {
		if errors.Is(err, flowquery.ErrTooManyFlows) {
			a := badRequest(err)
			return &a
		}
	}
	return nil
}

// fedFlowDetail is a federated console's GET /api/flow: the local
// FlowDetail (its Seen each with the server that keeps the record) and
// the servers' outcomes.
type fedFlowDetail struct {
	FlowDetail
	Servers []Server `json:"servers"`
}

// Flow answers GET /api/flow from every server: the Community ID's
// flow records of each (GET /flows?community_id=), together in the
// local order (first time, agent, interface; then server order), each
// with its server; Agents by name (an agent on two servers, after a
// failover, is one capture point, as correlate --from takes it); the
// correlation over the flow's packets of the servers that kept a
// record, merged in time order (federate.Each, as correlate --from
// reads them). A server failing during the correlation is its
// correlate_error, not a correlation that counts its packets as lost.
func (f *federated) Flow(ctx context.Context, v url.Values) Answer {
	if a := flowArgs(v); a != nil {
		return *a
	}
	link := v.Encode()
	cfg, err := queryhttp.ParseQuery(v, ".", time.Now())
	if err != nil {
		return badRequest(err)
	}
	p := queryhttp.Params{Agents: cfg.Agents, Ifaces: cfg.Ifaces, Since: timeParam(cfg.Since), Until: timeParam(cfg.Until), CommunityID: cfg.CommunityID}
	got, sums, srv, errs := f.fetchFlows(ctx, p)
	if a := tooMany(errs); a != nil {
		return *a
	}
	if down(srv) {
		return noneAnswered(srv, errs)
	}
	d := fedFlowDetail{FlowDetail: FlowDetail{CommunityID: cfg.CommunityID, Seen: []flowquery.JSON{}, Agents: []string{},
		Packets: "/packets?" + link, Download: "/api/download?" + link, Coverage: flowsCoverage(srv, sums)}, Servers: srv}
	var holders []queryhttp.ClientConfig
	for _, g := range got {
		d.Seen = append(d.Seen, g.j)
		if !slices.Contains(d.Agents, g.fl.Agent) {
			d.Agents = append(d.Agents, g.fl.Agent)
		}
	}
	for i, cc := range f.cfg.Servers {
		if slices.ContainsFunc(got, func(g fedFlow) bool { return g.j.Server == cc.Addr }) {
			pa := p
			pa.Agents = d.Agents
			holders = append(holders, f.client(i, pa))
		}
	}
	if len(d.Agents) >= 2 {
		src := &fedSource{cfg: federate.Config{Servers: holders, Timeout: f.cfg.Timeout}}
		rep, err := correlate.RunSource(ctx, correlate.Config{Agents: d.Agents, Ifaces: cfg.Ifaces, Since: cfg.Since, Until: cfg.Until}, src, nil)
		if err != nil {
			d.CorrelateError = oneLine(err)
		} else {
			d.Correlation = &rep
		}
	}
	return ok(d)
}

// flowArgs refuses what GET /api/flow does not take and a missing
// community_id (nil: the arguments are usable).
func flowArgs(v url.Values) *Answer {
	for _, k := range []string{"filter", "count", "max_bytes"} {
		if _, ok := v[k]; ok {
			a := badRequest(fmt.Errorf("%s: GET /api/flow takes community_id, agent, iface, since and until", k))
			return &a
		}
	}
	if len(v["community_id"]) != 1 || v["community_id"][0] == "" {
		a := badRequest(errors.New("community_id: GET /api/flow needs one flow's Community ID"))
		return &a
	}
	return nil
}

// fedSource is a correlate.Source over servers: their packets merged
// in time order (federate.Each, not partial: a server failing fails
// it), the files they read summed.
type fedSource struct{ cfg federate.Config }

// Each gives the merged packets to fn.
func (s *fedSource) Each(ctx context.Context, fn func(*query.Packet) error) (query.Result, error) {
	fr, err := federate.Each(ctx, s.cfg, fn)
	var res query.Result
	for _, v := range fr.Servers {
		if v.Result != nil {
			res.FilesRead += v.Result.FilesRead
		}
	}
	return res, err
}
