package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/pcapsync/pcapsync/internal/metrics"
	"github.com/pcapsync/pcapsync/internal/queryhttp"
)

// statusDoc is status --from --json: every server, its outcome and its
// status as served.
type statusDoc struct {
	Time    time.Time      `json:"time"`
	Servers []serverStatus `json:"servers"`
}

// serverStatus is one server of statusDoc.
type serverStatus struct {
	Server  string          `json:"server"`
	Outcome string          `json:"outcome"`          // ok, refused, unreachable, timed out, failed
	Reason  string          `json:"reason,omitempty"` // why, for all but ok
	Status  json.RawMessage `json:"status,omitempty"` // as the server served it; absent unless ok
}

// runStatusFrom is status --from: every server's GET /status at once,
// each within --timeout. Exit: nil when every server answered, errPartial
// when some did not, an error when none did (the table or document
// printed in both cases).
func runStatusFrom(ctx context.Context, s streams, srv *serverFlags, raw bool) error {
	ccs, err := srv.clients(s.stderr)
	if err != nil {
		return err
	}
	doc := statusDoc{Time: time.Now().UTC(), Servers: make([]serverStatus, len(ccs))}
	rows := make([]metrics.ServerStatus, len(ccs))
	outs := askAll(ctx, ccs, maxParallel, srv.timeout, func(ctx context.Context, i int, _ *stall) (int, error) {
		b, err := queryhttp.FetchStatus(ctx, ccs[i])
		if err != nil {
			return 0, err
		}
		var st metrics.Status
		if err := json.Unmarshal(b, &st); err != nil || (st.Agents == nil && st.Time.IsZero()) {
			return 0, fmt.Errorf("%w: not a collector's status", queryhttp.ErrFailed)
		}
		doc.Servers[i].Status, rows[i].Status = b, st
		return len(st.Agents), nil
	})
	var down []string
	for i, o := range outs {
		d := &doc.Servers[i]
		d.Server, d.Outcome, d.Reason, rows[i].Server = o.Server, o.Outcome, o.Reason, o.Server
		if o.Outcome != outcomeOK {
			down = append(down, o.describe("agents"))
			d.Status, rows[i].Status = nil, metrics.Status{}
			rows[i].Down, rows[i].Reason = o.Outcome, o.Reason
		}
	}
	if raw {
		enc := json.NewEncoder(s.stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(doc)
	} else {
		err = metrics.WriteServersTable(s.stdout, rows)
	}
	switch {
	case err != nil:
		return err
	case len(down) == len(outs):
		return fmt.Errorf("no server gave its status: %s", strings.Join(down, "; "))
	case len(down) > 0:
		return fmt.Errorf("%w: %d of %d servers gave no status: %s", errPartial, len(down), len(outs), strings.Join(down, "; "))
	}
	return nil
}
