package frontdoor

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// maxLogKeys bounds the kinds of lines a RateLog tells apart; the lines
// of more kinds at once share one kind's limit.
const maxLogKeys = 16

// RateLog logs at most one line per Interval of each kind (a key: the
// message, or the key given to WarnKey, at most 16 kinds at once), each
// with the count of the lines of its kind it did not log since
// ("not_logged_since_last"); those go to DEBUG instead, where a logger
// enables it. The zero value logs at most one line of a kind per
// DefaultLogInterval. Safe for concurrent use.
type RateLog struct {
	Interval time.Duration

	mu    sync.Mutex
	kinds map[string]*logKind
}

type logKind struct {
	last   time.Time
	missed uint64
}

// Warn logs msg with args at WARN, unless a line with msg was logged
// less than Interval ago; it reports whether it logged.
func (r *RateLog) Warn(log *slog.Logger, msg string, args ...any) bool {
	return r.WarnKey(log, msg, msg, args...)
}

// WarnKey is Warn for lines of the kind key: a refusal's reason, say,
// so that refusals of different reasons are each logged.
func (r *RateLog) WarnKey(log *slog.Logger, key, msg string, args ...any) bool {
	iv := r.Interval
	if iv == 0 {
		iv = DefaultLogInterval
	}
	now := time.Now()
	r.mu.Lock()
	k := r.kind(key, now, iv)
	if !k.last.IsZero() && now.Sub(k.last) < iv {
		k.missed++
		r.mu.Unlock()
		if ctx := context.Background(); log.Enabled(ctx, slog.LevelDebug) {
			log.Log(ctx, slog.LevelDebug, msg, args...)
		}
		return false
	}
	missed := k.missed
	k.last, k.missed = now, 0
	r.mu.Unlock()
	log.Log(context.Background(), slog.LevelWarn, msg, append(args, "not_logged_since_last", missed)...)
	return true
}

// kind returns key's state; with maxLogKeys kinds already, it first
// forgets those idle for an interval with nothing untold, and failing
// that returns the shared state of the kinds beyond. r.mu is held.
func (r *RateLog) kind(key string, now time.Time, iv time.Duration) *logKind {
	if r.kinds == nil {
		r.kinds = map[string]*logKind{}
	}
	if k := r.kinds[key]; k != nil {
		return k
	}
	if len(r.kinds) >= maxLogKeys {
		for key, k := range r.kinds {
			if k.missed == 0 && now.Sub(k.last) >= iv {
				delete(r.kinds, key)
			}
		}
	}
	if len(r.kinds) >= maxLogKeys {
		key = "\x00more"
		if k := r.kinds[key]; k != nil {
			return k
		}
	}
	k := &logKind{}
	r.kinds[key] = k
	return k
}
