package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pcapsync/pcapsync/internal/federate"
	"github.com/pcapsync/pcapsync/internal/query"
	"github.com/pcapsync/pcapsync/internal/queryhttp"
)

// remoteSource is correlate --from's packets (a correlate.Source): every
// server's GET /query for the agents, at once, their pcapng streams
// merged in timestamp order by federate.Each, the merge of query --from
// (ties by agent name, then server order). An agent on several servers
// (after a failover) is its packets from all of them, by time, on an
// interface per server. Memory and the --server-timeout deadline are
// federate's.
type remoteSource struct {
	ccs     []queryhttp.ClientConfig
	timeout time.Duration
}

// Each gives the merged packets to fn. A server that fails fails it,
// naming the server (no partial correlation: a server missing would
// count its packets as lost); a 400 is a usage error.
func (r *remoteSource) Each(ctx context.Context, fn func(*query.Packet) error) (query.Result, error) {
	fres, err := federate.Each(ctx, federate.Config{Servers: r.ccs, Timeout: r.timeout}, fn)
	var res query.Result
	for _, v := range fres.Servers {
		if v.Result != nil {
			res.FilesRead += v.Result.FilesRead
		}
	}
	switch {
	case errors.Is(err, queryhttp.ErrBadRequest):
		return res, fmt.Errorf("%w: %w", errUsage, err)
	case errors.Is(err, federate.ErrServer), errors.Is(err, federate.ErrNoServer):
		return res, tlsHint(err, "--from")
	}
	return res, err
}
