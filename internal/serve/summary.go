package serve

import (
	"fmt"
	"io"

	"github.com/pcapsync/pcapsync/internal/collector"
	"github.com/pcapsync/pcapsync/internal/queryhttp"
	"github.com/pcapsync/pcapsync/internal/redisfeed"
	"github.com/pcapsync/pcapsync/internal/tap"
)

// Summary is what the collector process did: the core's counters (with
// the UDP server's), the taps' and the Redis feed's. Its JSON is one
// object: collector.Summary's keys, then "tap" and "redis", each only
// when that part ran.
type Summary struct {
	collector.Summary
	Tap   *tap.Summary       `json:"tap,omitempty"`
	Redis *redisfeed.Summary `json:"redis,omitempty"`
	Query *queryhttp.Summary `json:"query,omitempty"`
}

// Summary reads the summary of every part; call it once Run returned.
func (s *Service) Summary() Summary {
	sum := Summary{Summary: s.core.Summary()}
	if s.udp != nil {
		u := s.udp.Summary()
		sum.UDP = &u
	}
	if s.tap != nil {
		t := s.tap.Summary()
		sum.Tap = &t
	}
	if s.redis != nil {
		r := s.redis.Summary()
		sum.Redis = &r
	}
	if s.query != nil {
		q := s.query.Summary()
		sum.Query = &q
	}
	return sum
}

// WriteText writes the summary as lines, each "pcapsync collector: ...":
// one per UDP agent, the totals, the taps', the details the core adds
// when they are not zero, the Redis feed's and the query listener's.
func (s Summary) WriteText(w io.Writer) error {
	const prefix = "pcapsync collector:"
	var lines []string
	if s.UDP != nil {
		for _, a := range s.UDP.Agents {
			lines = append(lines, a.String())
		}
	}
	lines = append(lines, s.Summary.String())
	if s.Tap != nil {
		lines = append(lines, s.Tap.String())
	}
	lines = append(lines, s.Details()...)
	if s.Redis != nil {
		lines = append(lines, s.Redis.String())
	}
	if s.Query != nil {
		lines = append(lines, s.Query.String())
	}
	for _, l := range lines {
		if _, err := fmt.Fprintln(w, prefix, l); err != nil {
			return err
		}
	}
	return nil
}
