package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"time"

	"github.com/pcapsync/pcapsync/internal/pki"
	"github.com/pcapsync/pcapsync/internal/redisfeed"
)

// tailOptions is what `pcapsync tail` was asked for.
type tailOptions struct {
	Addr     string        // --collector-admin HOST:PORT (the collector's --tap listener)
	RedisURL string        // --redis URL
	Agent    string        // --agent NAME (required)
	Iface    string        // --iface NAME: only this interface of the agent ("" all)
	Filter   string        // --filter EXPR: tcpdump syntax, applied on the collector (tap) or here (redis)
	From     time.Duration // --from DUR: start this far back (redis)
	// RedisPrefix is --redis-prefix: the agent's stream is its key + name.
	RedisPrefix string
	Count       int           // --count N: stop after N packets (0: never)
	UntilIdle   time.Duration // --until-idle DUR: stop after DUR without a packet batch (0: never)
	TLS         *tls.Config   // for the tap; nil for plain TCP (--insecure)
	Token       string        // --token-file's token, for the tap
}

func runTail(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tail", "pcapsync tail (--collector-admin HOST:PORT | --redis URL) --agent NAME [--iface IF] [--filter EXPR] [--from DUR] [TLS flags | --insecure] > out.pcapng   (or | wireshark -k -i -)", stderr)
	var o tailOptions
	fs.StringVar(&o.Addr, "collector-admin", "", "the collector's tap listener (its --tap address): stream what it writes live")
	fs.StringVar(&o.RedisURL, "redis", "", "follow the agent's stream in this Redis (redis://HOST:PORT/DB) instead")
	fs.StringVar(&o.Agent, "agent", "", "the agent to watch (required)")
	fs.StringVar(&o.Iface, "iface", "", "only this interface of the agent (default: all)")
	fs.StringVar(&o.Filter, "filter", "", "tcpdump-syntax filter")
	fs.DurationVar(&o.From, "from", 0, "with --redis: start this far back, e.g. 5m (default: from now on)")
	fs.StringVar(&o.RedisPrefix, "redis-prefix", redisfeed.DefaultPrefix, "with --redis: the collector's --redis-prefix")
	fs.IntVar(&o.Count, "count", 0, "with --redis: stop after writing this many packets (default: run until interrupted)")
	fs.DurationVar(&o.UntilIdle, "until-idle", 0, "with --redis: stop when nothing arrived for this long, e.g. 2s (default: run until interrupted)")
	tlsCA := fs.String("tls-ca", "", "verify the collector's certificate against these CAs (PEM)")
	tlsCert := fs.String("tls-cert", "", "client certificate (PEM), if the collector requires one")
	tlsKey := fs.String("tls-key", "", "the key of --tls-cert (PEM)")
	serverName := fs.String("tls-server-name", "", "the name the collector's certificate must carry (default: the host in --collector-admin)")
	tokenFile := fs.String("token-file", "", "send this shared token to the collector")
	insecure := fs.Bool("insecure", false, "plain TCP to the tap, without TLS")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case o.Agent == "":
		return fmt.Errorf("%w: tail needs --agent", errUsage)
	case (o.Addr == "") == (o.RedisURL == ""):
		return fmt.Errorf("%w: tail needs one of --collector-admin and --redis", errUsage)
	case o.From < 0:
		return fmt.Errorf("%w: --from must not be negative", errUsage)
	case o.Count < 0 || o.UntilIdle < 0:
		return fmt.Errorf("%w: --count and --until-idle must not be negative", errUsage)
	case o.From != 0 && o.RedisURL == "":
		return fmt.Errorf("%w: --from needs --redis (the tap is live only)", errUsage)
	case (o.Count != 0 || o.UntilIdle != 0) && o.RedisURL == "":
		return fmt.Errorf("%w: --count and --until-idle work with --redis only (stop a tap with ^C)", errUsage)
	}
	log, err := newLogger(stderr, "warn")
	if err != nil {
		return err
	}
	if *tokenFile != "" {
		tok, err := readToken(*tokenFile, log)
		if err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		o.Token = tok
	}
	if o.Addr != "" {
		useTLS := *tlsCA != "" || *tlsCert != "" || *tlsKey != "" || *serverName != ""
		switch {
		case useTLS && *insecure:
			return fmt.Errorf("%w: --insecure and the --tls flags exclude each other", errUsage)
		case !*insecure:
			cfg, err := pki.ClientConfig(*tlsCA, *tlsCert, *tlsKey, *serverName)
			if err != nil {
				return fmt.Errorf("%w: %w", errUsage, err)
			}
			o.TLS = cfg
		}
		return tailTap(ctx, o, stdout, stderr)
	}
	return tailRedis(ctx, o, stdout, stderr)
}
