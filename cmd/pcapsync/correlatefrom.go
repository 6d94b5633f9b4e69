package main

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/pcapsync/pcapsync/internal/correlate"
	"github.com/pcapsync/pcapsync/internal/query"
	"github.com/pcapsync/pcapsync/internal/queryhttp"
)

// errMerged ends the streams the merge no longer reads.
var errMerged = errors.New("the merge ended")

// remoteSource is correlate --from's packets (a correlate.Source): every
// server's GET /query for the agents, at once, their pcapng streams
// merged in timestamp order. An agent on several servers (after a
// failover) is its packets from all of them, by time. Memory: a reader's
// buffer per server; each server waits while the merge reads the
// others (a pipe), its --server-timeout held meanwhile.
type remoteSource struct {
	ccs     []queryhttp.ClientConfig
	timeout time.Duration
	stderr  io.Writer
}

// Each gives the merged packets to fn. A server that fails fails it,
// naming the server (no partial correlation: a server missing would
// count its packets as lost).
func (r *remoteSource) Each(ctx context.Context, fn func(*query.Packet) error) (query.Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	n := len(r.ccs)
	prs, pws := make([]*io.PipeReader, n), make([]*io.PipeWriter, n)
	for i := range n {
		prs[i], pws[i] = io.Pipe()
	}
	results := make([]query.Result, n)
	done := make(chan []serverOutcome, 1)
	go func() {
		done <- askAll(ctx, r.ccs, n, r.timeout, func(ctx context.Context, i int, st *stall) (int, error) {
			var err error
			results[i], err = queryhttp.Fetch(ctx, r.ccs[i], stallWriter{pws[i], st})
			pws[i].CloseWithError(err) // nil: io.EOF
			return 0, err
		})
	}()
	srcs := make([]io.Reader, n)
	for i, pr := range prs {
		srcs[i] = pr
	}
	failed, err := correlate.MergeStreams(srcs, fn)
	for _, pr := range prs {
		pr.CloseWithError(errMerged)
	}
	if err != nil {
		cancel()
	}
	outs := <-done
	var res query.Result
	for _, rr := range results {
		res.FilesRead += rr.FilesRead
	}
	if err != nil && failed < 0 {
		return res, err
	}
	if serr := settle(outs, false, "packets", r.stderr); serr != nil {
		return res, serr
	}
	return res, err
}

// stallWriter holds a server's --server-timeout while the merge does
// not read, and starts it again once it has.
type stallWriter struct {
	w  io.Writer
	st *stall
}

func (s stallWriter) Write(p []byte) (int, error) {
	s.st.hold()
	n, err := s.w.Write(p)
	s.st.alive()
	return n, err
}
