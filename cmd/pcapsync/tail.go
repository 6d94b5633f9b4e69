package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pcapsync/pcapsync/internal/pki"
	"github.com/pcapsync/pcapsync/internal/redisfeed"
	"github.com/pcapsync/pcapsync/internal/tap"
)

const tailUsage = `Writes what the collector writes, live, as pcapng to stdout: from the
collector's tap (--tap, the address of its --tap listener) or from its
Redis feed (--redis, one agent's). Pipe it into wireshark -k -i - or
tshark -r -. FILTER (tcpdump syntax) is the trailing words or --filter;
-c N stops after N packets, as tcpdump -c.

Without --agent the tap sends its port's default selection: every agent
(--agent '*' too), unless the collector's --tap HOST:PORT=AGENT names
one. --redis needs --agent (its streams are per agent).

The tap speaks TLS, verified against --tls-ca (the CA that signed the
collector's certificate; without it the system's roots), except with
--insecure: plain TCP, which a tap serves on a loopback address, or
from a collector without TLS. The old name of --tap, --collector-admin,
is still accepted.`

func tailCommand(s streams) *cobra.Command {
	c := leaf("tail (--tap HOST:PORT | --redis URL) [--agent NAME|'*'] [--iface IF] [-c N] [--from DUR] [TLS flags | --insecure] [FILTER] > out.pcapng", "stream the packets being written as pcapng, live",
		tailUsage, cobra.ArbitraryArgs, func(fs *pflag.FlagSet) runFunc {
			var tc tap.StreamConfig
			var rc redisfeed.CopyConfig
			fs.StringVar(&tc.Addr, "tap", "", "the collector's tap listener (its --tap address): stream what it writes live")
			aliases(fs, map[string]string{"collector-admin": "tap"})
			fs.StringVar(&rc.URL, "redis", "", "follow the agent's stream in this Redis (redis://HOST:PORT/DB) instead")
			fs.StringVar(&rc.Agent, "agent", "", "the agent to watch, or '*' for every agent (default: the tap port's default selection, every agent unless the collector names one; required with --redis)")
			fs.StringVar(&rc.Iface, "iface", "", "only this interface of the agent (default: all)")
			fs.StringVar(&rc.Filter, "filter", "", "tcpdump-syntax filter (or give it as the trailing arguments)")
			fs.DurationVar(&rc.From, "from", 0, "with --redis: start this far back, e.g. 5m (default: from now on)")
			fs.StringVar(&rc.Prefix, "redis-prefix", redisfeed.DefaultPrefix, "with --redis: the collector's --redis-prefix")
			fs.IntVarP(&rc.Count, "count", "c", 0, "stop after writing this many packets, as tcpdump -c (default: run until interrupted)")
			fs.DurationVar(&rc.Idle, "until-idle", 0, "with --redis: stop when nothing arrived for this long, e.g. 2s (default: run until interrupted)")
			tf := tailTLSFlags(fs)
			return func(ctx context.Context, args []string) error {
				if err := filterArgs(fs, args, &rc.Filter); err != nil {
					return err
				}
				return runTail(ctx, s, tc, rc, tf)
			}
		})
	annotate(c.Flags(), "filter", annPositional)
	return c
}

func runTail(ctx context.Context, s streams, tc tap.StreamConfig, rc redisfeed.CopyConfig, tf *tapClientFlags) error {
	// Which flags go with which source; the sources' Validate checks
	// the values.
	switch {
	case (tc.Addr == "") == (rc.URL == ""):
		return usageError("tail needs one of --tap and --redis")
	case rc.Agent == "" && rc.URL != "":
		return usageError("tail --redis needs --agent (the feed is one stream per agent)")
	case rc.From != 0 && rc.URL == "":
		return usageError("--from needs --redis (the tap is live only)")
	case rc.Idle != 0 && rc.URL == "":
		return usageError("--until-idle works with --redis only (stop a tap with -c N or ^C)")
	case rc.Count < 0 && rc.URL == "":
		return usageError("-c %d: want a count of packets above 0 (0: no limit)", rc.Count)
	}
	log := slog.New(slog.NewTextHandler(s.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if rc.URL != "" {
		rc.Logger = log
		if err := rc.Validate(); err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		redisfeed.LogClientTo(log)
		return redisfeed.Copy(ctx, rc, s.stdout)
	}
	tc.Request = tap.Request{Agent: rc.Agent, Iface: rc.Iface, Filter: rc.Filter}
	tc.Count = int64(rc.Count)
	if err := tf.apply(&tc, log); err != nil {
		return err
	}
	if err := tc.Validate(); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	_, err := tap.Stream(ctx, tc, s.stdout)
	err = tlsHint(err, "--tap")
	if errors.Is(err, tap.ErrStreamEnded) {
		fmt.Fprintln(s.stderr, "pcapsync tail:", err)
		return nil
	}
	return err
}

// tapClientFlags are tail's flags for the tap's TLS and token.
type tapClientFlags struct {
	ca, cert, key, serverName, token *string
	insecure                         *bool
}

func tailTLSFlags(fs *pflag.FlagSet) *tapClientFlags { return tapClientTLSFlags(fs, "--tap") }

// tapClientTLSFlags defines the TLS and token flags of a client of the
// collector's listener addrFlag.
func tapClientTLSFlags(fs *pflag.FlagSet, addrFlag string) *tapClientFlags {
	proto := "TCP"
	if addrFlag == "--from" {
		proto = "HTTP"
	}
	return &tapClientFlags{
		ca:         fs.String("tls-ca", "", "verify the collector's certificate against these CAs (PEM)"),
		cert:       fs.String("tls-cert", "", "client certificate (PEM), if the collector requires one"),
		key:        fs.String("tls-key", "", "the key of --tls-cert (PEM)"),
		serverName: fs.String("tls-server-name", "", "the name the collector's certificate must carry (default: the host in "+addrFlag+")"),
		token:      fs.String("token-file", "", "send this shared token to the collector"),
		insecure:   fs.Bool("insecure", false, "plain "+proto+" to "+addrFlag+", without TLS"),
	}
}

// given reports whether any of the flags was given.
func (f *tapClientFlags) given(fs *pflag.FlagSet) bool {
	for _, n := range []string{"tls-ca", "tls-cert", "tls-key", "tls-server-name", "token-file", "insecure"} {
		if fs.Changed(n) {
			return true
		}
	}
	return false
}

// apply sets tc's TLS (unless --insecure) and its request's token from
// the files the flags name.
func (f *tapClientFlags) apply(tc *tap.StreamConfig, log *slog.Logger) error {
	var err error
	tc.TLS, tc.Request.Token, err = f.config(log)
	return err
}

// config returns the TLS configuration (nil with --insecure) and the
// token the flags name; their errors are usage errors.
func (f *tapClientFlags) config(log *slog.Logger) (*tls.Config, string, error) {
	var tok string
	if *f.token != "" {
		var err error
		if tok, err = readToken(*f.token, log); err != nil {
			return nil, "", fmt.Errorf("%w: %w", errUsage, err)
		}
	}
	useTLS := *f.ca != "" || *f.cert != "" || *f.key != "" || *f.serverName != ""
	switch {
	case useTLS && *f.insecure:
		return nil, "", fmt.Errorf("%w: --insecure and the --tls flags exclude each other", errUsage)
	case *f.insecure:
		return nil, tok, nil
	}
	cfg, err := pki.ClientConfig(*f.ca, *f.cert, *f.key, *f.serverName)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", errUsage, err)
	}
	return cfg, tok, nil
}

// tlsHint adds what to do to the error of a connection whose TLS
// handshake failed: the server's certificate not trusted or not for the
// name dialled, or a plain listener answering. Other errors are
// returned as they are.
func tlsHint(err error, addrFlag string) error {
	var (
		host    x509.HostnameError
		unknown x509.UnknownAuthorityError
		record  tls.RecordHeaderError
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &host):
		return fmt.Errorf("%w (give --tls-server-name with a name the collector's certificate carries, or that name in %s)", err, addrFlag)
	case errors.As(err, &unknown):
		proto := "TCP"
		if addrFlag == "--from" {
			proto = "HTTP"
		}
		return fmt.Errorf("%w (give --tls-ca FILE, the CA that signed the collector's certificate (gen certs: ca.pem); or --insecure, plain %s, for a listener on loopback)", err, proto)
	case errors.As(err, &record), strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return fmt.Errorf("%w (the listener answered without TLS: give --insecure)", err)
	}
	return err
}

// filterArgs sets *filter to a command's trailing words, the filter as
// tcpdump takes it, unless there are none; with --filter too it is a
// usage error.
func filterArgs(fs *pflag.FlagSet, args []string, filter *string) error {
	if len(args) == 0 {
		return nil
	}
	if fs.Changed("filter") {
		return usageError("give the filter either with --filter or as arguments, not both")
	}
	*filter = strings.Join(args, " ")
	return nil
}
