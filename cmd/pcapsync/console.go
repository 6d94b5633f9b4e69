package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"strconv"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pcapsync/pcapsync/internal/console"
	"github.com/pcapsync/pcapsync/internal/pki"
	"github.com/pcapsync/pcapsync/internal/queryhttp"
)

const consoleUsage = `Serve the read-only browser console (docs/console.md: the Agents,
Timeline, Flows and Packets pages, the pcapng download) over the query
listeners (--query-listen) of several collectors or writers, as a client
of them: every page asks every server at once and shows what they
answer together, each agent with its server; a server that is down
(refused, unreachable, silent for --server-timeout, failed) is named
on every page, with why, while the others answer.

The servers are asked as pcapsync query --from asks them: --from,
--servers, and the TLS flags (--tls-ca, --tls-cert, --tls-key,
--tls-server-name, --token-file; --insecure for plain HTTP to them).

The console's own listener, --listen HOST:PORT, is the front door of a
collector's --console-listen: HTTPS with --listen-cert and --listen-key,
client certificates signed by --listen-client-ca admitted without a
login, users logging in with the token of --login-token-file (a session
cookie). Without a certificate it speaks plain HTTP, on a loopback
address or with --listen-insecure only. With neither a login token nor
client CAs, everyone who reaches it is admitted.

It runs until interrupted (SIGINT, SIGTERM).`

// fedConsoleFlags are pcapsync console's flags.
type fedConsoleFlags struct {
	srv                         serverFlags
	listen, cert, key, clientCA string
	insecure                    bool
	tokenFile                   string
	maxConns                    int
}

func consoleCommand(s streams) *cobra.Command {
	return leaf("console --from HOST:PORT[,HOST:PORT...] [--servers FILE] [--server-timeout D] [TLS flags | --insecure] --listen HOST:PORT [--listen-cert FILE --listen-key FILE [--listen-client-ca FILE] | --listen-insecure] [--login-token-file FILE]",
		"serve the browser console over many servers' query listeners", consoleUsage, noArgs, func(fs *pflag.FlagSet) runFunc {
			f := &fedConsoleFlags{}
			f.srv.defineFrom(fs, "agents, flows, packets and timelines")
			f.srv.defineTimeout(fs)
			fs.StringVar(&f.listen, "listen", "", "serve the console on `HOST:PORT` (required)")
			fs.StringVar(&f.cert, "listen-cert", "", "the console's TLS certificate (PEM; may hold the chain)")
			fs.StringVar(&f.key, "listen-key", "", "the key of --listen-cert (PEM)")
			fs.StringVar(&f.clientCA, "listen-client-ca", "", "admit browsers with a client certificate signed by these CAs (PEM), without a login")
			fs.BoolVar(&f.insecure, "listen-insecure", false, "serve the console in plain HTTP on an address that is not loopback, without TLS")
			fs.StringVar(&f.tokenFile, "login-token-file", "", "the token users enter at the console's login (a file holding it)")
			fs.IntVar(&f.maxConns, "max-conns", queryhttp.DefaultMaxConns, "most connections to the console open at once (a quarter per address)")
			return func(ctx context.Context, _ []string) error {
				return runConsole(ctx, s, f, fs)
			}
		})
}

// check refuses the flags that do not go together.
func (f *fedConsoleFlags) check() error {
	host, _, err := net.SplitHostPort(f.listen)
	switch {
	case !f.srv.given():
		return usageError("console: --from or --servers: the servers whose query listeners it reads")
	case f.listen == "":
		return usageError("console: --listen HOST:PORT: where it serves the console")
	case err != nil:
		return usageError("--listen %q: want HOST:PORT: %v", f.listen, err)
	case f.srv.timeout <= 0:
		return usageError("--server-timeout %s: want a duration above 0", f.srv.timeout)
	case f.maxConns < 1:
		return usageError("--max-conns %d: want 1 or more", f.maxConns)
	case (f.cert == "") != (f.key == ""):
		return usageError("--listen-cert and --listen-key go together")
	case f.clientCA != "" && f.cert == "":
		return usageError("--listen-client-ca needs --listen-cert and --listen-key (client certificates are asked over TLS)")
	case f.cert != "" && f.insecure:
		return usageError("--listen-insecure and --listen-cert exclude each other")
	case f.cert == "" && !f.insecure && !isLoopback(host):
		return usageError("--listen %s: give --listen-cert and --listen-key (HTTPS), or --listen-insecure for plain HTTP (loopback addresses need neither)", f.listen)
	}
	return nil
}

// isLoopback reports whether host is a loopback address or localhost.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// runConsole serves the federated console until ctx ends.
func runConsole(ctx context.Context, s streams, f *fedConsoleFlags, fs *pflag.FlagSet) error {
	if err := f.srv.check(fs); err != nil {
		return err
	}
	if err := f.check(); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(s.stderr, nil))
	ccs, err := f.srv.clients(s.stderr)
	if err != nil {
		return err
	}
	src, err := console.NewFederated(console.FederatedConfig{Servers: ccs, Timeout: f.srv.timeout, Logger: log})
	if err != nil {
		return err
	}
	tc, tok, err := f.listenerTLS(log)
	if err != nil {
		return err
	}
	h, err := console.New(console.Config{Source: src, Token: tok, Logger: log})
	if err != nil {
		return err
	}
	srv, err := queryhttp.New(queryhttp.Config{Listen: f.listen, MaxConns: f.maxConns, TLS: tc, Handler: h, Name: "console", Logger: log})
	if err != nil {
		return err
	}
	scheme := "https"
	if tc == nil {
		scheme = "http"
	}
	if tok == "" && f.clientCA == "" {
		log.Warn("console without --login-token-file or --listen-client-ca: everyone who reaches it is admitted")
	}
	log.Info("console serving", "url", scheme+"://"+srv.Addr()+"/", "servers", strconv.Itoa(len(ccs)))
	return srv.Run(ctx)
}

// listenerTLS returns the console listener's TLS configuration (nil:
// plain HTTP) and its login token; their files' errors are usage
// errors.
func (f *fedConsoleFlags) listenerTLS(log *slog.Logger) (*tls.Config, string, error) {
	var tok string
	if f.tokenFile != "" {
		var err error
		if tok, err = readToken(f.tokenFile, log); err != nil {
			return nil, "", fmt.Errorf("%w: --login-token-file: %w", errUsage, err)
		}
	}
	if f.cert == "" {
		return nil, tok, nil
	}
	tc, err := pki.ServerConfig(f.cert, f.key, f.clientCA)
	if err != nil {
		return nil, "", fmt.Errorf("%w: --listen-cert: %w", errUsage, err)
	}
	return tc, tok, nil
}
