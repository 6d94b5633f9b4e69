package correlate

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/pcapsync/pcapsync/internal/fielderr"

	"github.com/pcapsync/pcapsync/internal/query"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// DefaultWindow is the default of Config.Window.
const DefaultWindow = 2 * time.Second

// Config is one correlation. The zero value, but for Dir and at least
// two Agents, correlates every packet of those agents with a window of
// DefaultWindow.
type Config struct {
	// Dir is the output root (a collector's or a writer's --dir).
	Dir string
	// Agents are the capture points, by exact name, two or more; pairs
	// are reported in this order (Agents[0] -> Agents[1], ...).
	Agents []string
	// Ifaces, Since, Until, Filter and ReorderMem select and read the
	// packets as the query's fields of the same names do (query.Config).
	Ifaces       []string
	Since, Until time.Time
	Filter       string
	ReorderMem   int64
	// Window bounds how far apart in time (either way, on the two
	// agents' clocks) the two sightings of a packet may be: a packet
	// seen at A and not at B within Window is seen at A never at B.
	// It must exceed the path's delay plus the clocks' offset. 0 means
	// DefaultWindow.
	Window time.Duration
	// Logger receives warnings; nil discards them.
	Logger *slog.Logger
}

// Validate reports what is wrong with c.
func (c *Config) Validate() error {
	q := c.query()
	return errors.Join(c.ValidateAgents(), q.Validate())
}

// ValidateAgents checks the agents and the window: Validate less the
// query's fields (Dir, the selection), which RunSource does not read.
func (c *Config) ValidateAgents() error {
	var errs []error
	if len(c.Agents) < 2 {
		errs = append(errs, fielderr.Errorf("%d agents: correlate needs two or more ({correlate.Agents} A {correlate.Agents} B)", len(c.Agents)))
	}
	for i, a := range c.Agents {
		if err := wire.ValidateName(a); err != nil {
			errs = append(errs, fmt.Errorf("agent: %w", err))
		} else if slices.Contains(c.Agents[:i], a) {
			errs = append(errs, fmt.Errorf("agent %q named twice", a))
		}
	}
	if c.Window < 0 {
		errs = append(errs, fmt.Errorf("window %v is negative", c.Window))
	}
	return errors.Join(errs...)
}

func (c *Config) window() time.Duration {
	if c.Window == 0 {
		return DefaultWindow
	}
	return c.Window
}

// query is the query that reads c's packets, every agent's merged in
// timestamp order.
func (c *Config) query() query.Config {
	return query.Config{
		Dir: c.Dir, Agents: c.Agents, Ifaces: c.Ifaces,
		Since: c.Since, Until: c.Until, Filter: c.Filter,
		ReorderMem: c.ReorderMem, Logger: c.Logger,
	}
}

// describe is c in words, for the unmatched pcapng's comment.
func (c *Config) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pcapsync correlate --agent %s --window %v", strings.Join(c.Agents, ","), c.window())
	if len(c.Ifaces) > 0 {
		fmt.Fprintf(&b, " --iface %s", strings.Join(c.Ifaces, ","))
	}
	if !c.Since.IsZero() {
		fmt.Fprintf(&b, " --since %s", c.Since.UTC().Format(time.RFC3339Nano))
	}
	if !c.Until.IsZero() {
		fmt.Fprintf(&b, " --until %s", c.Until.UTC().Format(time.RFC3339Nano))
	}
	if c.Filter != "" {
		fmt.Fprintf(&b, " %s", c.Filter)
	}
	return b.String()
}
