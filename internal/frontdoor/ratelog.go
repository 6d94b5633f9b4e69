package frontdoor

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// RateLog logs at most one line per Interval, each with the count of
// the lines it did not log since the previous one
// ("not_logged_since_last"); those go to DEBUG instead, where a logger
// enables it. The zero value logs at most one line per
// DefaultLogInterval. Safe for concurrent use.
type RateLog struct {
	Interval time.Duration

	mu     sync.Mutex
	last   time.Time
	missed uint64
}

// Warn logs msg with args at WARN, unless a line was logged less than
// Interval ago; it reports whether it logged.
func (r *RateLog) Warn(log *slog.Logger, msg string, args ...any) bool {
	return r.Log(log, slog.LevelWarn, msg, args...)
}

// Log is Warn at level.
func (r *RateLog) Log(log *slog.Logger, level slog.Level, msg string, args ...any) bool {
	iv := r.Interval
	if iv == 0 {
		iv = DefaultLogInterval
	}
	now := time.Now()
	r.mu.Lock()
	if !r.last.IsZero() && now.Sub(r.last) < iv {
		r.missed++
		r.mu.Unlock()
		if ctx := context.Background(); level > slog.LevelDebug && log.Enabled(ctx, slog.LevelDebug) {
			log.Log(ctx, slog.LevelDebug, msg, args...)
		}
		return false
	}
	missed := r.missed
	r.last, r.missed = now, 0
	r.mu.Unlock()
	log.Log(context.Background(), level, msg, append(args, "not_logged_since_last", missed)...)
	return true
}
