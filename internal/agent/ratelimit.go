package agent

// rateLimiter is a token bucket over packet timestamps: rate packets per
// second, bursts of up to burst packets. Driven by the capture clock, it
// reads no clock itself. The zero value (rate 0) admits everything. Not
// safe for concurrent use: each source owns one.
type rateLimiter struct {
	rate, burst float64
	tokens      float64
	last        int64 // timestamp of the previous packet, Unix ns
}

func newRateLimiter(rate, burst float64) rateLimiter {
	return rateLimiter{rate: rate, burst: burst, tokens: burst}
}

// allow reports whether a packet at ts fits the rate.
func (l *rateLimiter) allow(ts int64) bool {
	if l.rate == 0 {
		return true
	}
	if l.last != 0 && ts > l.last {
		l.tokens = min(l.burst, l.tokens+float64(ts-l.last)*l.rate/1e9)
	}
	l.last = max(l.last, ts)
	if l.tokens < 1 {
		return false
	}
	l.tokens--
	return true
}
