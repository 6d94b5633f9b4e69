package console

import (
	"net"
	"sync"
	"time"
)

// Bounds of the failed logins (POST /login with a wrong token): each
// source address has a bucket of LoginBurst failures, one coming back
// every LoginRefill; an address with none left is answered 429 (with
// Retry-After) without its token being looked at. At most
// MaxLoginSources addresses are held; past them, the addresses not
// held share one bucket.
const (
	LoginBurst      = 5
	LoginRefill     = 12 * time.Second // 5 a minute
	MaxLoginSources = 4096
)

// loginLimiter counts failed logins per source address: a token bucket
// each (lazily refilled), at most max held; a bucket full again is
// forgotten first when the table is full, and the addresses that find
// it full still share overflow.
type loginLimiter struct {
	burst  float64
	refill time.Duration
	max    int
	now    func() time.Time

	mu       sync.Mutex
	m        map[string]*bucket
	overflow bucket
}

// bucket is one source's failures left, as of at.
type bucket struct {
	tokens float64
	at     time.Time
}

func newLoginLimiter() *loginLimiter {
	return &loginLimiter{burst: LoginBurst, refill: LoginRefill, max: MaxLoginSources, now: time.Now, m: map[string]*bucket{},
		overflow: bucket{tokens: LoginBurst}}
}

// source is the address of a request's peer (its host: any port).
func source(remote string) string {
	if h, _, err := net.SplitHostPort(remote); err == nil {
		return h
	}
	return remote
}

// fill brings b up to now.
func (l *loginLimiter) fill(b *bucket, now time.Time) {
	if !b.at.IsZero() {
		b.tokens = min(l.burst, b.tokens+float64(now.Sub(b.at))/float64(l.refill))
	}
	b.at = now
}

// bucket returns src's bucket, filled to now; a new one when the table
// has room (after forgetting the full ones), else the overflow.
func (l *loginLimiter) bucket(src string, now time.Time) *bucket {
	b := l.m[src]
	if b == nil {
		if len(l.m) >= l.max {
			for k, o := range l.m {
				if l.fill(o, now); o.tokens >= l.burst {
					delete(l.m, k)
				}
			}
		}
		if len(l.m) >= l.max {
			b = &l.overflow
		} else {
			b = &bucket{tokens: l.burst, at: now}
			l.m[src] = b
		}
	}
	l.fill(b, now)
	return b
}

// wait returns how long src must wait before its next login: 0 when it
// has a failure left.
func (l *loginLimiter) wait(src string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bucket(src, l.now())
	if b.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - b.tokens) * float64(l.refill))
}

// failed takes one failure of src's bucket.
func (l *loginLimiter) failed(src string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bucket(src, l.now())
	b.tokens = max(0, b.tokens-1)
}

// held is how many sources are held.
func (l *loginLimiter) held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}
