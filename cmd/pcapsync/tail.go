package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pcapsync/pcapsync/internal/pki"
	"github.com/pcapsync/pcapsync/internal/redisfeed"
	"github.com/pcapsync/pcapsync/internal/tap"
)

const tailUsage = `Writes what the collector writes for one agent, live, as pcapng to
stdout: from the collector's tap (--tap, the address of its --tap
listener) or from its Redis feed (--redis). Pipe it into wireshark -k
-i - or tshark -r -. The old name of --tap, --collector-admin, is still
accepted.`

func tailCommand(s streams) *cobra.Command {
	return leaf("tail (--tap HOST:PORT | --redis URL) --agent NAME [--iface IF] [--filter EXPR] [--from DUR] [TLS flags | --insecure] > out.pcapng", "stream one agent's packets as pcapng, live",
		tailUsage, noArgs, func(fs *pflag.FlagSet) runFunc {
			var tc tap.StreamConfig
			var rc redisfeed.CopyConfig
			fs.StringVar(&tc.Addr, "tap", "", "the collector's tap listener (its --tap address): stream what it writes live")
			aliases(fs, map[string]string{"collector-admin": "tap"})
			fs.StringVar(&rc.URL, "redis", "", "follow the agent's stream in this Redis (redis://HOST:PORT/DB) instead")
			fs.StringVar(&rc.Agent, "agent", "", "the agent to watch (required)")
			fs.StringVar(&rc.Iface, "iface", "", "only this interface of the agent (default: all)")
			fs.StringVar(&rc.Filter, "filter", "", "tcpdump-syntax filter")
			fs.DurationVar(&rc.From, "from", 0, "with --redis: start this far back, e.g. 5m (default: from now on)")
			fs.StringVar(&rc.Prefix, "redis-prefix", redisfeed.DefaultPrefix, "with --redis: the collector's --redis-prefix")
			fs.IntVar(&rc.Count, "count", 0, "with --redis: stop after writing this many packets (default: run until interrupted)")
			fs.DurationVar(&rc.Idle, "until-idle", 0, "with --redis: stop when nothing arrived for this long, e.g. 2s (default: run until interrupted)")
			tf := tailTLSFlags(fs)
			return func(ctx context.Context, _ []string) error {
				return runTail(ctx, s, tc, rc, tf)
			}
		})
}

func runTail(ctx context.Context, s streams, tc tap.StreamConfig, rc redisfeed.CopyConfig, tf *tapClientFlags) error {
	// Which flags go with which source; the sources' Validate checks
	// the values.
	switch {
	case rc.Agent == "":
		return usageError("tail needs --agent")
	case (tc.Addr == "") == (rc.URL == ""):
		return usageError("tail needs one of --tap and --redis")
	case rc.From != 0 && rc.URL == "":
		return usageError("--from needs --redis (the tap is live only)")
	case (rc.Count != 0 || rc.Idle != 0) && rc.URL == "":
		return usageError("--count and --until-idle work with --redis only (stop a tap with ^C)")
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
	if err := tf.apply(&tc, log); err != nil {
		return err
	}
	if err := tc.Validate(); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	_, err := tap.Stream(ctx, tc, s.stdout)
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
