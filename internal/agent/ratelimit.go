package agent

import "time"

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

// pacer spaces packets at rate per second on average, by the wall
// clock: a UDP replay has nothing else to slow it down (no
// acknowledgements), and a collector that cannot keep up loses what
// overflows its receive buffer. The zero value (rate 0) never waits.
type pacer struct {
	rate  float64
	start time.Time
	n     uint64
}

// wait blocks until the next packet is due.
func (p *pacer) wait() {
	if p.rate == 0 {
		return
	}
	if p.n == 0 {
		p.start = time.Now()
	}
	due := p.start.Add(time.Duration(float64(p.n) / p.rate * 1e9))
	p.n++
	if d := time.Until(due); d > time.Millisecond {
		time.Sleep(d)
	}
}
