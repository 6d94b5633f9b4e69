package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/pcapsync/pcapsync/internal/federate"
	"github.com/pcapsync/pcapsync/internal/queryhttp"
)

// defaultServerTimeout is --server-timeout: how long a server may say
// nothing before it is given up (the federated query's).
const defaultServerTimeout = federate.DefaultServerTimeout

// maxParallel bounds the servers asked at once; the others wait.
const maxParallel = 16

// errPartial marks an answer from some of the servers only (--partial
// given and a server failed): exit status 4.
var errPartial = errors.New("partial answer")

// errStalled is the cause of a server's context cancelled by
// --server-timeout.
var errStalled = errors.New("stalled")

// Outcomes of one server of a command asking many.
const (
	outcomeOK          = "ok"
	outcomeRefused     = "refused"
	outcomeUnreachable = "unreachable"
	outcomeTimedOut    = "timed out"
	outcomeFailed      = "failed"
)

// serverOutcome is what one server gave a command asking many.
type serverOutcome struct {
	Server  string // HOST:PORT
	Outcome string // ok, refused, unreachable, timed out, failed
	Reason  string // why, for all but ok
	Items   int    // flows received (0 where not counted)
	err     error
}

// describe is the outcome for a person: "a:7780: ok, 12 flows",
// "a:7780: failed after 12 flows: reason".
func (o serverOutcome) describe(unit string) string {
	s := o.Server + ": " + o.Outcome
	if o.Outcome != outcomeOK && o.Items > 0 {
		s += fmt.Sprintf(" after %d %s", o.Items, unit)
	}
	if o.Outcome == outcomeOK {
		s += fmt.Sprintf(", %d %s", o.Items, unit)
	}
	if o.Reason != "" {
		s += ": " + o.Reason
	}
	return s
}

// serverFlags are the flags of a command asking many servers: --from
// (one or several), --servers FILE, --server-timeout, --partial, and
// the TLS flags every server is asked with.
type serverFlags struct {
	from, file string
	timeout    time.Duration
	partial    bool
	tls        *tapClientFlags
}

// define adds the flags to fs; what names what the command asks
// ("flows").
func (f *serverFlags) define(fs *pflag.FlagSet, what string) {
	f.defineFrom(fs, what)
	f.defineTimeout(fs)
	fs.BoolVar(&f.partial, "partial", false, "when a server fails, answer from the others (exit status 4) instead of failing")
}

// defineTimeout adds --server-timeout.
func (f *serverFlags) defineTimeout(fs *pflag.FlagSet) {
	fs.DurationVar(&f.timeout, "server-timeout", defaultServerTimeout, "give up a server that sends nothing for this long (connecting included)")
}

// defineFrom adds --from, --servers and the TLS flags only: a command
// that answers with what every server gave (status) has no --partial,
// and sets timeout itself.
func (f *serverFlags) defineFrom(fs *pflag.FlagSet, what string) {
	fs.StringVar(&f.from, "from", "", "ask the "+what+" of the collectors or writers serving --query-listen at HOST:PORT, several separated by commas, over HTTPS")
	fs.StringVar(&f.file, "servers", "", "ask the servers listed in FILE too, one HOST:PORT per line ('#' comments)")
	f.tls = tapClientTLSFlags(fs, "--from")
}

// given reports whether servers are named.
func (f *serverFlags) given() bool { return f.from != "" || f.file != "" }

// check refuses the server flags without servers, and a timeout that
// is not positive.
func (f *serverFlags) check(fs *pflag.FlagSet) error {
	switch {
	case !f.given() && (f.tls.given(fs) || fs.Changed("server-timeout") || fs.Changed("partial")):
		return usageError("the TLS flags, --token-file, --insecure, --server-timeout and --partial go with --from or --servers")
	case f.timeout <= 0:
		return usageError("--server-timeout %s: want a duration above 0", f.timeout)
	}
	return nil
}

// clients returns a ClientConfig for each server, TLS and token set.
func (f *serverFlags) clients(stderr io.Writer) ([]queryhttp.ClientConfig, error) {
	addrs, err := serverList(f.from, f.file, *f.tls.insecure)
	if err != nil {
		return nil, err
	}
	tc, tok, err := f.tls.config(warnLogger(stderr))
	if err != nil {
		return nil, err
	}
	ccs := make([]queryhttp.ClientConfig, len(addrs))
	for i, a := range addrs {
		ccs[i] = queryhttp.ClientConfig{Addr: a, TLS: tc, Token: tok, DialTimeout: f.timeout}
		if tc != nil {
			ccs[i].TLS = tc.Clone() // its ServerName set per server
		}
	}
	return ccs, nil
}

// stall gives a server up when it sends nothing for its timeout.
type stall struct {
	t *time.Timer
	d time.Duration
}

// alive says the server sent something: its timeout starts again.
func (s *stall) alive() { s.t.Reset(s.d) }

// askAll calls ask for every server, at most parallel at once, and
// returns their outcomes in the order of ccs. ask's context is cancelled
// when its server sends nothing for timeout: ask calls st.alive for
// every item it receives, and returns how many it received.
func askAll(ctx context.Context, ccs []queryhttp.ClientConfig, parallel int, timeout time.Duration,
	ask func(ctx context.Context, i int, st *stall) (int, error)) []serverOutcome {
	out := make([]serverOutcome, len(ccs))
	sem := make(chan struct{}, max(parallel, 1))
	var wg sync.WaitGroup
	for i := range ccs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			sctx, cancel := context.WithCancelCause(ctx)
			defer cancel(nil)
			st := &stall{t: time.AfterFunc(timeout, func() { cancel(errStalled) }), d: timeout}
			defer st.t.Stop()
			n, err := ask(sctx, i, st)
			out[i] = classify(ccs[i].Addr, n, err, context.Cause(sctx), timeout)
		})
	}
	wg.Wait()
	return out
}

// classify names the outcome of a server's err, given its context's
// cause.
func classify(addr string, n int, err, cause error, timeout time.Duration) serverOutcome {
	o := serverOutcome{Server: addr, Outcome: outcomeOK, Items: n, err: err}
	var op *net.OpError
	switch {
	case err == nil:
		return o
	case errors.Is(cause, errStalled):
		o.Outcome, o.Reason = outcomeTimedOut, fmt.Sprintf("nothing for %s (--server-timeout)", timeout)
	case errors.Is(err, queryhttp.ErrRefused), errors.Is(err, queryhttp.ErrBadRequest):
		o.Outcome, o.Reason = outcomeRefused, oneLine(err)
	case errors.As(err, &op) && op.Op == "dial":
		o.Outcome, o.Reason = outcomeUnreachable, oneLine(op.Err)
	default:
		o.Outcome, o.Reason = outcomeFailed, oneLine(err)
	}
	return o
}

func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }

// settle decides a command's fate from its servers' outcomes: nil when
// all are ok; a usage error when a server refused the request as bad
// (every server would); without partial, an error naming every server
// that failed; with partial, errPartial naming them, unless none is ok.
// Each failed server is a line on stderr with partial.
func settle(outs []serverOutcome, partial bool, unit string, stderr io.Writer) error {
	var failed []string
	ok := 0
	for _, o := range outs {
		if errors.Is(o.err, queryhttp.ErrBadRequest) {
			return fmt.Errorf("%w: server %s: %w", errUsage, o.Server, o.err)
		}
		if o.Outcome == outcomeOK {
			ok++
			continue
		}
		failed = append(failed, o.describe(unit))
	}
	switch {
	case len(failed) == 0:
		return nil
	case !partial || ok == 0:
		return fmt.Errorf("%d of %d servers failed: %s", len(failed), len(outs), strings.Join(failed, "; "))
	}
	for _, o := range outs {
		fmt.Fprintf(stderr, "pcapsync: server %s\n", o.describe(unit))
	}
	return fmt.Errorf("%w (--partial): %d of %d servers failed: %s", errPartial, len(failed), len(outs), strings.Join(failed, "; "))
}
