package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/pcapsync/pcapsync/internal/pki"
	"github.com/pcapsync/pcapsync/internal/redisfeed"
	"github.com/pcapsync/pcapsync/internal/tap"
)

func runTail(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tail", "pcapsync tail (--collector-admin HOST:PORT | --redis URL) --agent NAME [--iface IF] [--filter EXPR] [--from DUR] [TLS flags | --insecure] > out.pcapng   (or | wireshark -k -i -)", stderr)
	var tc tap.StreamConfig
	var rc redisfeed.CopyConfig
	fs.StringVar(&tc.Addr, "collector-admin", "", "the collector's tap listener (its --tap address): stream what it writes live")
	fs.StringVar(&rc.URL, "redis", "", "follow the agent's stream in this Redis (redis://HOST:PORT/DB) instead")
	fs.StringVar(&rc.Agent, "agent", "", "the agent to watch (required)")
	fs.StringVar(&rc.Iface, "iface", "", "only this interface of the agent (default: all)")
	fs.StringVar(&rc.Filter, "filter", "", "tcpdump-syntax filter")
	fs.DurationVar(&rc.From, "from", 0, "with --redis: start this far back, e.g. 5m (default: from now on)")
	fs.StringVar(&rc.Prefix, "redis-prefix", redisfeed.DefaultPrefix, "with --redis: the collector's --redis-prefix")
	fs.IntVar(&rc.Count, "count", 0, "with --redis: stop after writing this many packets (default: run until interrupted)")
	fs.DurationVar(&rc.Idle, "until-idle", 0, "with --redis: stop when nothing arrived for this long, e.g. 2s (default: run until interrupted)")
	tf := tailTLSFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// Which flags go with which source; the sources' Validate checks
	// the values.
	switch {
	case rc.Agent == "":
		return fmt.Errorf("%w: tail needs --agent", errUsage)
	case (tc.Addr == "") == (rc.URL == ""):
		return fmt.Errorf("%w: tail needs one of --collector-admin and --redis", errUsage)
	case rc.From != 0 && rc.URL == "":
		return fmt.Errorf("%w: --from needs --redis (the tap is live only)", errUsage)
	case (rc.Count != 0 || rc.Idle != 0) && rc.URL == "":
		return fmt.Errorf("%w: --count and --until-idle work with --redis only (stop a tap with ^C)", errUsage)
	}
	log, err := newLogger(stderr, "warn")
	if err != nil {
		return err
	}
	if rc.URL != "" {
		rc.Logger = log
		if err := rc.Validate(); err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		redisfeed.LogClientTo(log)
		return redisfeed.Copy(ctx, rc, stdout)
	}
	tc.Request = tap.Request{Agent: rc.Agent, Iface: rc.Iface, Filter: rc.Filter}
	if err := tf.apply(&tc, log); err != nil {
		return err
	}
	if err := tc.Validate(); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	_, err = tap.Stream(ctx, tc, stdout)
	if errors.Is(err, tap.ErrStreamEnded) {
		fmt.Fprintln(stderr, "pcapsync tail:", err)
		return nil
	}
	return err
}

// tapClientFlags are tail's flags for the tap's TLS and token.
type tapClientFlags struct {
	ca, cert, key, serverName, token *string
	insecure                         *bool
}

func tailTLSFlags(fs *flag.FlagSet) *tapClientFlags {
	return &tapClientFlags{
		ca:         fs.String("tls-ca", "", "verify the collector's certificate against these CAs (PEM)"),
		cert:       fs.String("tls-cert", "", "client certificate (PEM), if the collector requires one"),
		key:        fs.String("tls-key", "", "the key of --tls-cert (PEM)"),
		serverName: fs.String("tls-server-name", "", "the name the collector's certificate must carry (default: the host in --collector-admin)"),
		token:      fs.String("token-file", "", "send this shared token to the collector"),
		insecure:   fs.Bool("insecure", false, "plain TCP to the tap, without TLS"),
	}
}

// apply sets tc's TLS (unless --insecure) and its request's token from
// the files the flags name.
func (f *tapClientFlags) apply(tc *tap.StreamConfig, log *slog.Logger) error {
	if *f.token != "" {
		tok, err := readToken(*f.token, log)
		if err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		tc.Request.Token = tok
	}
	useTLS := *f.ca != "" || *f.cert != "" || *f.key != "" || *f.serverName != ""
	switch {
	case useTLS && *f.insecure:
		return fmt.Errorf("%w: --insecure and the --tls flags exclude each other", errUsage)
	case !*f.insecure:
		cfg, err := pki.ClientConfig(*f.ca, *f.cert, *f.key, *f.serverName)
		if err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		tc.TLS = cfg
	}
	return nil
}
