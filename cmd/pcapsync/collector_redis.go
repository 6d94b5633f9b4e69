package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/redisfeed"
)

// redisFlags are the collector's --redis* flags.
type redisFlags struct {
	cfg      redisfeed.Config
	queue    int64
	compress compress.Spec
	feed     *redisfeed.Feed
}

// addRedisFlags registers the --redis* flags on fs.
func addRedisFlags(fs *flag.FlagSet) *redisFlags {
	r := &redisFlags{queue: redisfeed.DefaultQueueBytes}
	fs.StringVar(&r.cfg.URL, "redis", "", "also publish every written batch to a Redis Stream per agent at this URL (redis://[:PASSWORD@]HOST:PORT[/DB], rediss://, unix:///PATH); Redis down or slow never holds up the files: batches are dropped and counted")
	fs.StringVar(&r.cfg.Prefix, "redis-prefix", redisfeed.DefaultPrefix, "with --redis: the stream of agent NAME is PREFIX+NAME")
	r.compress = redisfeed.DefaultCompress
	fs.TextVar(&r.compress, "redis-compress", redisfeed.DefaultCompress, "with --redis: compress the records of each entry: s2, zstd[:1-22] or none")
	fs.Int64Var(&r.cfg.MaxLen, "redis-maxlen", redisfeed.DefaultMaxLen, "with --redis: keep about this many entries per stream (XADD MAXLEN ~)")
	fs.DurationVar(&r.cfg.MaxAge, "redis-max-age", 0, "with --redis: keep the entries of about this long instead of --redis-maxlen (XADD MINID ~), e.g. 10m")
	fs.Var(sizeFlag{&r.queue}, "redis-queue", "with --redis: memory for batches waiting to be published; when full, batches are dropped and counted")
	fs.DurationVar(&r.cfg.Timeout, "redis-timeout", redisfeed.DefaultTimeout, "with --redis: the longest a connect or one round trip to Redis may take")
	return r
}

// start starts the feed if --redis was given and returns it (nil
// otherwise); fs must have been parsed.
func (r *redisFlags) start(fs *flag.FlagSet, log *slog.Logger) (*redisfeed.Feed, error) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if r.cfg.URL == "" {
		for _, name := range []string{"redis-prefix", "redis-compress", "redis-maxlen", "redis-max-age", "redis-queue", "redis-timeout"} {
			if set[name] {
				return nil, fmt.Errorf("%w: --%s needs --redis", errUsage, name)
			}
		}
		return nil, nil
	}
	if r.cfg.MaxAge != 0 {
		if set["redis-maxlen"] {
			return nil, fmt.Errorf("%w: --redis-maxlen and --redis-max-age exclude each other: streams are trimmed by length or by age", errUsage)
		}
		r.cfg.MaxLen = 0
	}
	r.cfg.QueueBytes = r.queue
	r.cfg.Compress = &r.compress
	r.cfg.Logger = log
	if err := r.cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	// go-redis logs each failed dial itself; the feed logs outages once.
	redis.SetLogger(redisLogger{log})
	f, err := redisfeed.New(r.cfg)
	if err != nil {
		return nil, err
	}
	r.feed = f
	return f, nil
}

// stop publishes what is queued (for at most 5s), closes the feed and
// prints its summary line to stdout unless stdout is nil. Safe without a
// feed and more than once.
func (r *redisFlags) stop(stdout io.Writer) {
	if r.feed == nil {
		return
	}
	f := r.feed
	r.feed = nil
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f.Close(ctx)
	if stdout == nil {
		return
	}
	c := &f.Counters
	fmt.Fprintf(stdout, "pcapsync collector: redis feed: published %d, dropped %d, reconnects %d, records %d bytes stored as %d\n",
		c.Published.Load(), c.Dropped.Load(), c.Reconnects.Load(), c.RawBytes.Load(), c.SentBytes.Load())
}

// redisLogger sends go-redis's own messages to the debug log.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.Debug("go-redis: " + fmt.Sprintf(format, v...))
}
