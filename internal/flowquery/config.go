package flowquery

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"path"
	"time"
)

// DefaultMaxFlows bounds the flows a Run holds (about 400 bytes each:
// 400 MiB at most).
const DefaultMaxFlows = 1 << 20

// maxFlowFile bounds the bytes of a flow file read: a record takes at
// least 40 bytes, so 256 MiB is over 6 million records, far beyond what
// one data file's table writes.
const maxFlowFile = 256 << 20

// Config is one selection of flows. The zero value, but for Dir, selects
// every flow of every agent.
type Config struct {
	// Dir is the output root.
	Dir string
	// Agents selects agents by name or glob (path.Match); none: all.
	Agents []string
	// Ifaces selects interfaces by glob: with a ':' over "AGENT:IF",
	// without over the interface part alone. None: all.
	Ifaces []string
	// Since (inclusive) and Until (exclusive): a flow is selected when
	// its first..last packet times overlap [Since, Until). Zero: no
	// bound.
	Since, Until time.Time
	// Filter is a tcpdump-syntax expression run on each flow's synthetic
	// packet (doc.go); "" selects all.
	Filter string
	// CommunityID, if not "", selects the flows of this Community ID
	// (v1, seed 0) only.
	CommunityID string
	// MaxFlows bounds the flows held; 0 means DefaultMaxFlows.
	MaxFlows int
	// Logger receives warnings (damaged flow files); nil discards them.
	Logger *slog.Logger
}

// The times int64 nanoseconds hold: Since and Until beyond are refused.
var (
	minTime = time.Unix(0, math.MinInt64).UTC()
	maxTime = time.Unix(0, math.MaxInt64).UTC()
)

// Validate checks c: Dir a directory, the globs, the range (times that
// int64 nanoseconds hold, since before until), MaxFlows.
func (c *Config) Validate() error {
	if c.Dir == "" {
		return fmt.Errorf("%w: no output root", ErrConfig)
	}
	if st, err := os.Stat(c.Dir); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	} else if !st.IsDir() {
		return fmt.Errorf("%w: output root %s is not a directory", ErrConfig, c.Dir)
	}
	for _, p := range append(append([]string{}, c.Agents...), c.Ifaces...) {
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("%w: pattern %q: %w", ErrConfig, p, err)
		}
	}
	for _, b := range []struct {
		name string
		t    time.Time
	}{{"since", c.Since}, {"until", c.Until}} {
		if !b.t.IsZero() && (b.t.Before(minTime) || b.t.After(maxTime)) {
			return fmt.Errorf("%w: %s: %s is out of range: want a time from %s to %s", ErrConfig, b.name,
				b.t.UTC().Format(time.RFC3339Nano), minTime.Format(time.RFC3339Nano), maxTime.Format(time.RFC3339Nano))
		}
	}
	if !c.Since.IsZero() && !c.Until.IsZero() && !c.Since.Before(c.Until) {
		return fmt.Errorf("%w: empty time range: since %s is not before until %s", ErrConfig,
			c.Since.UTC().Format(time.RFC3339Nano), c.Until.UTC().Format(time.RFC3339Nano))
	}
	if c.MaxFlows < 0 {
		return fmt.Errorf("%w: max flows %d is negative", ErrConfig, c.MaxFlows)
	}
	return nil
}

// bounds returns the range in Unix ns.
func (c *Config) bounds() (since, until int64) {
	since, until = math.MinInt64, math.MaxInt64
	if !c.Since.IsZero() {
		since = c.Since.UnixNano()
	}
	if !c.Until.IsZero() {
		until = c.Until.UnixNano()
	}
	return since, until
}
