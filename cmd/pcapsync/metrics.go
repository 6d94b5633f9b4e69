package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pcapsync/pcapsync/internal/metrics"
)

// metricsUsage is the help of --metrics for a command serving paths,
// whose usual port is port.
func metricsUsage(port int, paths string) string {
	return fmt.Sprintf("serve Prometheus metrics at HOST:PORT (%s), e.g. 127.0.0.1:%d, this command's port in deploy/; no authentication: bind to loopback or protect it (default off)", paths, port)
}

const statusUsage = `Prints the agents a collector knows (GET http://HOST:PORT/status on the
collector's --metrics listener): address, transport, how long connected,
packets and bytes per second over the last 10 s, drops as the agent
reports them, batches lost, the last sequence received and the lag
(batches received but not yet acknowledged). A writer's status adds its
Kafka partitions.

It asks --metrics HOST:PORT, by default the collector's port on this
host. With --config FILE, the configuration file of a collector, writer
or agent (/etc/pcapsync/collector.conf), it asks the address of the
file's "metrics" line and skips the file's other settings of those
commands; a name that is none of their settings is refused. The old name
of --metrics, --collector-admin, is still accepted.

--from A,B,C (and --servers FILE) asks the query listeners of many
collectors and writers instead (their --query-listen: GET /status over
HTTPS, with the TLS flags, --token-file or --insecure as query --from)
and prints one table of every server's agents, a SERVER column first;
a server that gives no status within --timeout is a row saying why.
--json prints one document: every server with its outcome and its
status as served. Exit status: 0 when every server answered, 4 when
some did not (their rows say so), 1 when none did.`

// annForeign names, space-separated, the commands whose settings a
// command skips in its configuration file instead of refusing them
// (status reads a collector's file for its metrics address).
const annForeign = "pcapsync/foreign-settings"

func statusCommand(s streams) *cobra.Command {
	c := leaf("status [--metrics HOST:PORT | --config FILE | --from HOST:PORT[,HOST:PORT...] [--servers FILE] [TLS flags | --insecure]] [--json]",
		"print the agents a collector knows, or many collectors", statusUsage, noArgs, func(fs *pflag.FlagSet) runFunc {
			addr := fs.String("metrics", metrics.DefaultStatusAddr, "the HOST:PORT of the collector's (or writer's) metrics listener: its --metrics")
			aliases(fs, map[string]string{"collector-admin": "metrics"})
			raw := fs.Bool("json", false, "print the JSON as the collector serves it")
			timeout := fs.Duration("timeout", 5*time.Second, "give up after this long (with --from: on each server)")
			srv := &serverFlags{}
			srv.defineFrom(fs, "status")
			return func(ctx context.Context, _ []string) error {
				switch {
				case *timeout <= 0:
					return usageError("--timeout %s: want a duration above 0", *timeout)
				case srv.given() && fs.Changed("metrics"):
					return usageError("--metrics and --from exclude each other (--metrics asks one metrics listener, --from query listeners)")
				case srv.given():
					srv.timeout = *timeout
					return runStatusFrom(ctx, s, srv, *raw)
				case *addr == "":
					return usageError("status: --metrics is empty: give the collector's HOST:PORT")
				}
				return runStatus(ctx, s, *addr, *raw, *timeout)
			}
		})
	c.Annotations = map[string]string{annForeign: "collector writer agent"}
	return c
}

// runStatus prints the status of the collector at addr: as served
// (raw) or as a table.
func runStatus(ctx context.Context, s streams, addr string, raw bool, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, body, err := metrics.FetchStatus(ctx, addr)
	switch {
	case errors.Is(err, metrics.ErrAddress):
		return fmt.Errorf("%w: --metrics: %w", errUsage, err)
	case errors.Is(err, metrics.ErrNotHTTP):
		return fmt.Errorf("%w: is it the agents' port, or a tap? status asks a collector's metrics listener (--metrics, default %s)", err, metrics.DefaultStatusAddr)
	case errors.Is(err, metrics.ErrNoAnswer):
		return fmt.Errorf("%w: status asks a collector's metrics listener (its --metrics; default %s): is the collector running with it? give status --metrics HOST:PORT or --config FILE", err, metrics.DefaultStatusAddr)
	case err != nil:
		return err
	case raw:
		_, err := s.stdout.Write(body)
		return err
	}
	return metrics.WriteTable(s.stdout, st)
}
