package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/pcapsync/pcapsync/internal/federate"
	"github.com/pcapsync/pcapsync/internal/queryhttp"
)

// runRemoteQueries runs the query on the servers of --from and
// --servers: one server's answer copied byte for byte, several merged
// (federate).
func runRemoteQueries(ctx context.Context, s streams, f *queryFlags, fs *pflag.FlagSet) error {
	if f.cfg.Dir != "" {
		return usageError("--dir and --from exclude each other (--from queries the server's own root)")
	}
	addrs, err := serverList(f.srv.from, f.srv.file, *f.srv.tls.insecure)
	if err != nil {
		return err
	}
	if len(addrs) > 1 && fs.Changed("tls-server-name") {
		return usageError("--tls-server-name is the name of one server's certificate: with several servers each is checked against its own host")
	}
	cc, err := f.remoteConfig(s.stderr)
	if err != nil {
		return err
	}
	if len(addrs) == 1 {
		cc.Addr = addrs[0]
		return runRemoteQuery(ctx, s, f, cc)
	}
	return runFederated(ctx, s, f, cc, addrs)
}

// remoteConfig is the query as every server is asked it (no Addr): the
// selection, the times as remoteTime sends them, TLS and token.
func (f *queryFlags) remoteConfig(stderr io.Writer) (queryhttp.ClientConfig, error) {
	cc := queryhttp.ClientConfig{Params: queryhttp.Params{Agents: f.cfg.Agents, Ifaces: f.cfg.Ifaces,
		Filter: f.cfg.Filter, CommunityID: f.cfg.CommunityID, Count: f.cfg.Count, MaxBytes: f.cfg.MaxBytes}}
	now := time.Now()
	var err error
	if cc.Params.Since, err = remoteTime("since", f.since, now); err != nil {
		return cc, err
	}
	if cc.Params.Until, err = remoteTime("until", f.until, now); err != nil {
		return cc, err
	}
	cc.TLS, cc.Token, err = f.srv.tls.config(warnLogger(stderr))
	return cc, err
}

// runFederated runs the query cc on every server at once and writes
// their packets merged; the summary lists each server.
func runFederated(ctx context.Context, s streams, f *queryFlags, cc queryhttp.ClientConfig, addrs []string) error {
	fc := federate.Config{Timeout: f.srv.timeout, Partial: f.srv.partial, Count: f.cfg.Count, MaxBytes: f.cfg.MaxBytes,
		Query: remoteDescribe(cc.Params)}
	for _, a := range addrs {
		c := cc
		c.Addr = a
		if c.TLS != nil {
			c.TLS = c.TLS.Clone() // its ServerName, the server's host
		}
		fc.Servers = append(fc.Servers, c)
	}
	out, err := f.openOutput(s)
	if err != nil {
		return err
	}
	res, err := federate.Run(ctx, fc, out.w)
	err = out.close(err)
	if perr := f.summary.print(s.stderr, federatedSummary{res}); err == nil {
		err = perr
	}
	switch {
	case errors.Is(err, queryhttp.ErrBadRequest): // the servers refused the selection
		return fmt.Errorf("%w: %w", errUsage, err)
	case err != nil:
		return tlsHint(err, "--from")
	case !res.Covered():
		return fmt.Errorf("%w: no server holds data of the selection in the range (the summary says what each answered)", errUncovered)
	case res.Partial:
		var failed []string
		for _, v := range res.Servers {
			if v.Outcome != federate.OutcomeOK {
				failed = append(failed, v.Server+" "+v.Outcome)
			}
		}
		return fmt.Errorf("%w: without %s (--partial)", errPartial, strings.Join(failed, ", "))
	}
	return nil
}

// remoteDescribe is the query in words, as the servers are asked it.
func remoteDescribe(p queryhttp.Params) string {
	var b strings.Builder
	b.WriteString("pcapsync query")
	for _, o := range []struct{ flag, v string }{
		{"agent", strings.Join(p.Agents, ",")}, {"iface", strings.Join(p.Ifaces, ",")},
		{"since", p.Since}, {"until", p.Until},
	} {
		if o.v != "" {
			fmt.Fprintf(&b, " --%s %s", o.flag, o.v)
		}
	}
	if p.Filter != "" {
		b.WriteString(" " + p.Filter)
	}
	return b.String()
}

// federatedSummary is a federated query's summary; its JSON is
// federate.Result's.
type federatedSummary struct {
	federate.Result
}

func (q federatedSummary) writeText(w io.Writer) error {
	_, err := fmt.Fprintln(w, "pcapsync query:", q.Result)
	return err
}
