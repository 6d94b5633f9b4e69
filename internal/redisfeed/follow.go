package redisfeed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// FollowConfig configures Follow. Key is required; zero values of the
// other fields mean their defaults.
type FollowConfig struct {
	Key string // the stream, Key(prefix, agent)
	// From, if positive, starts with the entries added this long ago
	// (by the Redis server's clock) and still kept; 0 follows from now on.
	From time.Duration
	// Idle, if positive, ends Follow (with nil) after this long without
	// a new entry.
	Idle time.Duration
	// Block is the longest wait of one XREAD; 0 means 1s.
	Block time.Duration
	// MaxFrame caps a batch, compressed and decompressed; 0 means
	// wire.DefaultMaxFrame.
	MaxFrame int
	// Logger receives skipped entries and lost connections. nil:
	// slog.Default.
	Logger *slog.Logger
}

// Entry is one stream entry, decoded.
type Entry struct {
	ID     string // the stream id, "<ms>-<n>"
	Host   string
	Ifaces []wire.Interface // a record's IfIndex indexes them
	// Batch has been decompressed (Codec is wire.CodecNone) and
	// validated against len(Ifaces).
	Batch wire.Batch
}

// Follow reads the stream cfg.Key and calls fn with every entry in
// order; e and the bytes it refers to are valid only during the call.
// An entry that does not decode is logged and skipped. Follow returns
// when ctx ends (ctx's error), fn fails (its error), cfg.Idle passes
// without an entry (nil), or the first command fails (Redis is not
// there); later failures are logged and retried every second.
func Follow(ctx context.Context, rdb *redis.Client, cfg FollowConfig, fn func(e *Entry) error) error {
	if cfg.Block <= 0 {
		cfg.Block = time.Second
	}
	if cfg.MaxFrame <= 0 {
		cfg.MaxFrame = wire.DefaultMaxFrame
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	id, err := startID(ctx, rdb, cfg.Key, cfg.From)
	if err != nil {
		return err
	}
	dec, err := compress.NewDecoder(cfg.MaxFrame, 1)
	if err != nil {
		return err
	}
	defer dec.Close()
	var e Entry
	var buf []byte
	last := time.Now()
	failing := false
	for {
		block := cfg.Block
		if cfg.Idle > 0 {
			left := cfg.Idle - time.Since(last)
			if left <= 0 {
				return nil
			}
			block = min(block, max(left, time.Millisecond))
		}
		res, err := rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{cfg.Key, id}, Count: 256, Block: block}).Result()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, redis.Nil):
			continue
		case err != nil:
			if !failing {
				cfg.Logger.Warn("reading the redis stream failed; retrying every second", "stream", cfg.Key, "err", err)
				failing = true
			}
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
				return ctx.Err()
			}
			continue
		}
		if failing {
			cfg.Logger.Info("reading the redis stream again", "stream", cfg.Key)
			failing = false
		}
		for _, st := range res {
			for _, m := range st.Messages {
				id, last = m.ID, time.Now()
				if buf, err = decodeEntry(&e, m, dec, buf, cfg.MaxFrame); err != nil {
					cfg.Logger.Warn("skipping a stream entry", "stream", cfg.Key, "id", m.ID, "err", err)
					continue
				}
				if err := fn(&e); err != nil {
					return err
				}
			}
		}
	}
}

// startID returns the id after which XREAD starts: the stream's last
// entry (or 0-0) to follow from now on, else the last id possible just
// before now-from by the server's clock.
func startID(ctx context.Context, rdb *redis.Client, key string, from time.Duration) (string, error) {
	if from <= 0 {
		last, err := rdb.XRevRangeN(ctx, key, "+", "-", 1).Result()
		if err != nil {
			return "", fmt.Errorf("redis stream %s: %w", key, err)
		}
		if len(last) == 0 {
			return "0-0", nil
		}
		return last[0].ID, nil
	}
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		return "", fmt.Errorf("redis TIME: %w", err)
	}
	ms := now.Add(-from).UnixMilli()
	if ms <= 0 {
		return "0-0", nil
	}
	return strconv.FormatInt(ms-1, 10) + "-" + strconv.FormatUint(math.MaxUint64, 10), nil
}

// decodeEntry decodes m into e, decompressing the records into buf
// (grown as needed), and returns buf.
func decodeEntry(e *Entry, m redis.XMessage, dec *compress.Decoder, buf []byte, maxFrame int) ([]byte, error) {
	host, _ := m.Values[FieldHost].(string)
	ifs, ok1 := m.Values[FieldIfaces].(string)
	frame, ok2 := m.Values[FieldBatch].(string)
	if !ok1 || !ok2 {
		return buf, fmt.Errorf("fields %q or %q missing: %w", FieldIfaces, FieldBatch, ErrBadEntry)
	}
	e.ID, e.Host, e.Ifaces = m.ID, host, e.Ifaces[:0]
	rest := []byte(ifs)
	for len(rest) > 0 {
		h, p, r, err := wire.NextFrame(rest, wire.Limits{})
		if err == nil && h.Type != wire.TypeIface {
			err = fmt.Errorf("a %s frame", h.Type)
		}
		if err != nil {
			return buf, fmt.Errorf("interfaces: %w: %w", err, ErrBadEntry)
		}
		idx, ifc, err := wire.ParseIface(p)
		if err == nil && (idx != uint32(len(e.Ifaces)) || idx >= wire.MaxInterfaces) {
			err = fmt.Errorf("index %d, want %d", idx, len(e.Ifaces))
		}
		if err != nil {
			return buf, fmt.Errorf("interfaces: %w: %w", err, ErrBadEntry)
		}
		e.Ifaces = append(e.Ifaces, ifc)
		rest = r
	}
	h, p, rest, err := wire.NextFrame([]byte(frame), wire.Limits{MaxFrame: uint32(maxFrame)})
	switch {
	case err != nil:
		return buf, fmt.Errorf("batch: %w: %w", err, ErrBadEntry)
	case h.Type != wire.TypeBatch || len(rest) != 0:
		return buf, fmt.Errorf("batch field holds a %s frame and %d bytes more: %w", h.Type, len(rest), ErrBadEntry)
	}
	b, err := wire.ParseBatch(h.Flags, p, wire.BatchLimits{})
	if err != nil {
		return buf, fmt.Errorf("%w: %w", err, ErrBadEntry)
	}
	if b.Codec != wire.CodecNone {
		buf, err = dec.Decompress(buf, b.Codec, b.Records, int(b.RawLen))
		if err != nil {
			return buf, fmt.Errorf("batch seq %d: %w: %w", b.Seq, err, ErrBadEntry)
		}
		b.Records, b.Codec = buf, wire.CodecNone
	}
	if err := b.Validate(uint32(len(e.Ifaces))); err != nil {
		return buf, fmt.Errorf("%w: %w", err, ErrBadEntry)
	}
	e.Batch = b
	return buf, nil
}
