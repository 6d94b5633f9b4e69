package retention

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"time"
)

// Config says which closed files of the output root the Store
// deletes, oldest first by their last packet, to stay within limits
// (see the package doc for the rules and their guarantees). Its zero value
// keeps DefaultFreePercent of the filesystem free and sets no
// other limit.
type Config struct {
	// FreePercent keeps at least this percentage of the filesystem
	// holding Dir free (statfs, so every program's use of the disk
	// counts); FreeBytes keeps at least this many bytes free instead.
	// Set at most one of them. Both zero means DefaultFreePercent;
	// a negative value of either turns the rule off.
	FreePercent float64
	FreeBytes   int64
	// MaxBytes keeps the agents' data files below Dir, closed and open,
	// at most this large. 0 or negative: no limit.
	MaxBytes int64
	// MaxAge deletes the files whose last packet is older than this.
	// 0 or negative: none.
	MaxAge time.Duration
	// AgentBytes keeps each agent's data files, closed and open, at
	// most this large, so one busy agent cannot push out the history
	// of the others. 0 or negative: no limit.
	AgentBytes int64
}

// Defaults and bounds of Config.
const (
	DefaultFreePercent = 10
	MaxFreePercent     = 90
)

// Off reports whether no rule is on: the Store then deletes nothing.
func (c *Config) Off() bool {
	d := c.withDefaults()
	return d.FreePercent <= 0 && d.FreeBytes <= 0 && d.MaxBytes <= 0 && d.MaxAge <= 0 && d.AgentBytes <= 0
}

// Validate reports the first unusable setting; rotate is the writer's
// rotation size with its default applied (0: none).
func (c *Config) Validate(rotate int64) error {
	switch {
	case c.FreePercent > 0 && c.FreeBytes > 0:
		return fmt.Errorf("store: retain free space: give a percentage or a size, not both")
	case c.FreePercent > MaxFreePercent:
		return fmt.Errorf("store: retain free %g%% is above the maximum of %d%%", c.FreePercent, MaxFreePercent)
	case c.MaxBytes > 0 && rotate > 0 && c.MaxBytes < 2*rotate:
		return fmt.Errorf("store: retain size %d bytes is below two rotation files (2 x %d): it could hold no closed file", c.MaxBytes, rotate)
	case c.AgentBytes > 0 && rotate > 0 && c.AgentBytes < 2*rotate:
		return fmt.Errorf("store: retain agent size %d bytes is below two rotation files (2 x %d): it could hold no closed file", c.AgentBytes, rotate)
	case c.MaxAge > 0 && c.MaxAge < time.Second:
		return fmt.Errorf("store: retain age %s is below the minimum of 1s", c.MaxAge)
	}
	return nil
}

func (c *Config) withDefaults() Config {
	d := *c
	if d.FreePercent == 0 && d.FreeBytes == 0 {
		d.FreePercent = DefaultFreePercent
	}
	return d
}

// FormatFree writes the free-space rule as the collector's
// --retain-free takes it: "10%", a size in bytes, or "0" when it is
// off.
func FormatFree(c Config) string {
	d := c.withDefaults()
	switch {
	case d.FreeBytes > 0:
		return strconv.FormatInt(d.FreeBytes, 10)
	case d.FreePercent > 0:
		return strconv.FormatFloat(d.FreePercent, 'g', -1, 64) + "%"
	}
	return "0"
}

// Rule is the rule that chose a file for deletion.
type Rule int

// The rules, in the order the Store applies them.
const (
	RuleAge   Rule = iota // the last packet is older than MaxAge
	RuleAgent             // the agent's files exceed AgentBytes
	RuleSize              // the root exceeds MaxBytes
	RuleFree              // the filesystem has less free than FreePercent or FreeBytes
	NumRules
)

var ruleNames = [NumRules]string{"age", "agent", "size", "free"}

func (r Rule) String() string { return ruleNames[r] }

// Counters are retention's totals since Open. Safe for
// concurrent use.
type Counters struct {
	Files [NumRules]atomic.Uint64 // files deleted, by rule
	Bytes [NumRules]atomic.Uint64 // their bytes
	Short atomic.Uint64           // times a rule found nothing more it may delete while still over its limit
	// Foreign: paths below the root the Store did not make (or that are
	// links, FIFOs, devices where it made files), reported once each and
	// left alone (at most maxForeign are counted).
	Foreign atomic.Uint64

	// The write gate (gate.go): writes that waited for deletion
	// to catch up, and how long they waited in all.
	Holds     atomic.Uint64
	HeldNanos atomic.Uint64
}
