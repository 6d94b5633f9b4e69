package query

import (
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pcapsync/pcapsync/internal/fielderr"

	"github.com/pcapsync/pcapsync/internal/capture"
)

// threads is how many goroutines may read at once (Threads resolved):
// 1, one goroutine for everything.
func (c *Config) threads() int {
	if c.Follow {
		return 1
	}
	if c.Threads == 0 {
		return runtime.GOMAXPROCS(0)
	}
	return c.Threads
}

// DefaultReorderMem is the default of Config.ReorderMem.
const DefaultReorderMem = 32 << 20

// DefaultFollowDelay is the default of Config.FollowDelay.
const DefaultFollowDelay = time.Second

// DefaultFollowPoll is the default of Config.FollowPoll.
const DefaultFollowPoll = 200 * time.Millisecond

// DefaultThreads is the default of Config.Threads: 0, the CPUs the
// process may use (runtime.GOMAXPROCS).
const DefaultThreads = 0

// minStreamMem is the least reorder window of one agent, however many
// agents share Config.ReorderMem.
const minStreamMem = 256 << 10

// Config is one query. The zero value, but for Dir, selects every
// packet of every agent.
type Config struct {
	// Dir is the output root (a collector's or a writer's --dir).
	Dir string
	// Agents selects agents by name or glob (path.Match: *, ?, [...]);
	// none selects all.
	Agents []string
	// Ifaces selects interfaces by glob: a pattern with a ':' matches the
	// interface's name in the files, "AGENT:IF" ("web1:eth0",
	// "web*:eth0"); one without matches the interface part alone ("eth0":
	// that interface of every agent). None selects all.
	Ifaces []string
	// Since (inclusive) and Until (exclusive) bound the packets'
	// timestamps; a zero time is no bound. Validate refuses other times
	// outside 1677-09-21T00:12:43.145224192Z to
	// 2262-04-11T23:47:16.854775807Z (int64 Unix nanoseconds).
	Since, Until time.Time
	// Filter is a tcpdump-syntax (pcap-filter(7)) expression; "" passes
	// all. At most capture.MaxFilterLen bytes and capture.MaxFilterTerms
	// primitives joined by and/or; one holding a NUL byte is refused
	// (capture.CompileFilter).
	Filter string
	// CommunityID, if not "", passes only the packets whose Community
	// ID (v1, seed 0; flow.Key.CommunityID of the packet's key) is this
	// one, "1:" and 28 base64 characters: the packets of one flow,
	// exactly, whatever else the blocks read hold. It goes with the
	// filter (both must pass).
	CommunityID string
	// Blocks, if not nil, narrows what is read to the closed data files
	// it names (by their final name, without directory) and, of each,
	// to the index blocks it lists (the runs of a flow's records: see
	// internal/flowquery); a name listed without runs is read as
	// without Blocks, and so is every file being written (.part: its
	// flows' records come only as they end) and a file whose index is
	// not usable. Blocks only narrows the reading: the time range, the
	// filter and CommunityID still decide every packet.
	Blocks map[string][]BlockRun
	// Count, if above 0, stops the query after that many packets.
	Count int64
	// MaxBytes, if above 0, bounds the output: the query stops before a
	// packet (with its interface block, if new) would take it beyond.
	MaxBytes int64
	// ReorderMem bounds the packets the query holds to put each agent's
	// packets in timestamp order (their buffers, those kept for reuse
	// and the ring and heap ordering them), shared by the agents selected (each
	// gets at least 256 KiB). 0 means DefaultReorderMem.
	ReorderMem int64
	// NoIndex reads every file whole, as if none had an index (to
	// compare, or to distrust them).
	NoIndex bool
	// Follow goes on live once the files selected are read: each agent's
	// file being written is read as it grows (up to its last complete
	// batch), the next file once it is published, agents that appear
	// later are added, until every agent's packets are FollowDelay past
	// Until or the clock is (without Until: until Count, MaxBytes or the
	// context ends it, which is then no error). Packets wait for the
	// other agents to catch up at most FollowDelay after they are read;
	// one that turns up older than one already written is written all
	// the same and counted (Result.Late). See doc.go.
	Follow bool
	// FollowDelay bounds how long a packet read waits, in follow mode,
	// for the other agents before it is written, and how long an agent
	// without new packets holds the others back. 0 means
	// DefaultFollowDelay.
	FollowDelay time.Duration
	// FollowPoll is how often a followed file, directory and root are
	// looked at again, and the least often the output is flushed. 0
	// means DefaultFollowPoll.
	FollowPoll time.Duration
	// Threads is how many goroutines may read the files at once besides
	// the merge: with more than 1, every agent's files are read ahead by
	// a goroutine of their own (read, decompressed and spliced to the
	// index blocks selected, at most 1 MiB ahead per agent),
	// Threads of them reading at once, and Run's output is written by
	// a goroutine of its own from two 256 KiB buffers. 1 does everything
	// in the query's goroutine. The output is the same byte for byte.
	// Follow ignores it (one goroutine). 0 means the CPUs the process
	// may use (runtime.GOMAXPROCS); below 0 is refused.
	Threads int
	// Logger receives warnings; nil discards them.
	Logger *slog.Logger
}

// Validate reports what is wrong with c. It checks the filter's limits
// (an error wrapping ErrBadFilter), not its syntax (Prepare compiles
// it), the globs, and that Dir is a directory (a missing one: an error
// wrapping fs.ErrNotExist).
func (c *Config) Validate() error {
	var errs []error
	if c.Dir == "" {
		errs = append(errs, fielderr.Errorf("no output root ({query.Dir})"))
	} else if st, err := os.Stat(c.Dir); err != nil {
		errs = append(errs, fielderr.Errorf("{query.Dir}: %w", err))
	} else if !st.IsDir() {
		errs = append(errs, fielderr.Errorf("{query.Dir}: output root %s is not a directory", c.Dir))
	}
	for _, p := range c.Agents {
		if _, err := path.Match(p, ""); err != nil {
			errs = append(errs, fmt.Errorf("agent pattern %q: %w", p, err))
		}
	}
	for _, p := range c.Ifaces {
		if _, err := path.Match(p, ""); err != nil {
			errs = append(errs, fmt.Errorf("interface pattern %q: %w", p, err))
		}
	}
	for _, b := range []struct {
		name string
		t    time.Time
	}{{"since", c.Since}, {"until", c.Until}} {
		if !b.t.IsZero() && !inRange(b.t) {
			errs = append(errs, fmt.Errorf("%s: %w: %s is %s", b.name, ErrBadTime, b.t.UTC().Format(time.RFC3339Nano), outOfRange))
		}
	}
	if !c.Since.IsZero() && !c.Until.IsZero() && !c.Since.Before(c.Until) {
		errs = append(errs, fmt.Errorf("empty time range: since %s is not before until %s",
			c.Since.UTC().Format(time.RFC3339Nano), c.Until.UTC().Format(time.RFC3339Nano)))
	}
	if c.CommunityID != "" && !validCommunityID(c.CommunityID) {
		errs = append(errs, fmt.Errorf("community id %q: want 1: and 28 base64 characters", c.CommunityID))
	}
	if c.Count < 0 {
		errs = append(errs, fmt.Errorf("count %d is negative", c.Count))
	}
	if c.MaxBytes < 0 {
		errs = append(errs, fmt.Errorf("max bytes %d is negative", c.MaxBytes))
	}
	if c.ReorderMem < 0 {
		errs = append(errs, fmt.Errorf("reorder memory %d is negative", c.ReorderMem))
	}
	if c.Threads < 0 {
		errs = append(errs, fmt.Errorf("threads %d is negative", c.Threads))
	}
	if c.FollowDelay < 0 {
		errs = append(errs, fmt.Errorf("follow delay %s is negative", c.FollowDelay))
	}
	if c.FollowPoll < 0 {
		errs = append(errs, fmt.Errorf("follow poll interval %s is negative", c.FollowPoll))
	}
	if err := capture.CheckFilter(c.Filter); err != nil {
		errs = append(errs, &filterError{err})
	}
	return errors.Join(errs...)
}

// CheckRemoteFilter is capture.CheckRemoteFilter: for a filter a query
// server's client sent, it refuses names libpcap would look up. Its
// error matches capture.ErrFilterLimit.
func CheckRemoteFilter(expr string) error { return capture.CheckRemoteFilter(expr) }

// followTimes returns FollowDelay and FollowPoll with their defaults.
func (c *Config) followTimes() (delay, poll time.Duration) {
	delay, poll = c.FollowDelay, c.FollowPoll
	if delay == 0 {
		delay = DefaultFollowDelay
	}
	if poll == 0 {
		poll = DefaultFollowPoll
	}
	return delay, poll
}

// bounds returns Since and Until in Unix ns, unbounded ends as the
// extremes.
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

// The times a query can bound: packet timestamps are int64 nanoseconds
// since the Unix epoch.
var (
	minTime = time.Unix(0, math.MinInt64).UTC()
	maxTime = time.Unix(0, math.MaxInt64).UTC()
)

// inRange reports whether t is between minTime and maxTime.
func inRange(t time.Time) bool { return !t.Before(minTime) && !t.After(maxTime) }

// outOfRange is what an error says of a time not inRange.
var outOfRange = "out of range: want a time from " + minTime.Format(time.RFC3339Nano) + " to " + maxTime.Format(time.RFC3339Nano)

// checked returns t, or the zero time and an error wrapping ErrBadTime
// quoting s, if t is not inRange.
func checked(t time.Time, s string) (time.Time, error) {
	if !inRange(t) {
		return time.Time{}, fmt.Errorf("%w: %q is %s", ErrBadTime, s, outOfRange)
	}
	return t, nil
}

// ParseTime is ParseTimeIn without a zone for local times: a date and
// time without a zone or offset is refused (a query listener does not
// know its client's zone; pcapsync query --from resolves it first).
func ParseTime(s string, now time.Time) (time.Time, error) { return ParseTimeIn(s, now, nil) }

// ParseTimeIn reads a time bound as the query flags take it:
//
//   - a date and time, RFC 3339 ("2026-11-24T10:02:00Z",
//     "2026-11-24T11:02:00.123456789+01:00") or as Wireshark and
//     tcpdump -tttt print it, with a space ("2026-11-24 10:02:00",
//     "2026-11-24 10:02:00.123456"): seconds optional, up to nine
//     fractional digits, a date alone is its midnight; the zone Z, UTC,
//     an offset (+01:00, +0100), or none: then the time is in loc (the
//     system's zone or TZ for the CLI), refused if loc is nil, and
//     refused if loc's clocks skip it or show it twice (a daylight
//     saving change: the error names the offsets to choose from);
//   - a Go duration, meaning that long before now ("10m", "1h30m",
//     "90s", "500ms");
//   - Unix time in seconds with up to nine fractional digits
//     ("1732442520.123456789", as tshark's frame.time_epoch shows it).
//
// The result is exact to the nanosecond. A time outside what Unix
// nanoseconds in an int64 hold (1677-09-21T00:12:43.145224192Z to
// 2262-04-11T23:47:16.854775807Z) is refused with that range. Every
// error wraps ErrBadTime.
func ParseTimeIn(s string, now time.Time, loc *time.Location) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, fmt.Errorf("%w: empty", ErrBadTime)
	}
	if t, ok, err := parseDateTime(s, loc); ok {
		if err != nil {
			return time.Time{}, fmt.Errorf("%w: %q %w", ErrBadTime, s, err)
		}
		return checked(t, s)
	}
	if t, ok := parseEpoch(s); ok {
		return checked(t, s)
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("%w: %q: a relative time counts back from now and cannot be negative", ErrBadTime, s)
		}
		t := now.Add(-d)
		return checked(t, s)
	}
	return time.Time{}, fmt.Errorf("%w: %q: want a date and time (2026-11-24 10:02:00.5, in the local zone, or RFC 3339: 2026-11-24T10:02:00.5Z), a duration back from now (10m) or Unix seconds (1732442520.5)", ErrBadTime, s)
}

// IsRelative reports whether s is a relative time bound (a duration
// back from now) as ParseTimeIn reads it, rather than an absolute one.
func IsRelative(s string) bool {
	_, err := time.ParseDuration(strings.TrimSpace(s))
	return err == nil
}

// dateTime is a date, an optional time of day and an optional zone.
var dateTime = regexp.MustCompile(`^(\d{4})-(\d{2})-(\d{2})(?:[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?)? ?(Z|z|UTC|[+-]\d{2}:?\d{2})?$`)

// parseDateTime reads s if it is a date and time (ok); err says what is
// wrong with one that looks like it.
func parseDateTime(s string, loc *time.Location) (t time.Time, ok bool, err error) {
	m := dateTime.FindStringSubmatch(s)
	if m == nil {
		return time.Time{}, false, nil
	}
	var f [7]int // year, month, day, hour, minute, second, nanosecond
	for i := range 6 {
		f[i], _ = strconv.Atoi(m[i+1]) // empty: 0
	}
	if m[7] != "" {
		f[6], _ = strconv.Atoi(m[7] + strings.Repeat("0", 9-len(m[7])))
	}
	wall := time.Date(f[0], time.Month(f[1]), f[2], f[3], f[4], f[5], f[6], time.UTC)
	if f[1] < 1 || f[1] > 12 || wall.Day() != f[2] || f[3] > 23 || f[4] > 59 || f[5] > 59 {
		return time.Time{}, true, errors.New("is not a valid date and time")
	}
	switch zone := m[8]; {
	case zone == "Z" || zone == "z" || zone == "UTC":
		return wall, true, nil
	case zone != "":
		digits := strings.ReplaceAll(zone[1:], ":", "")
		h, _ := strconv.Atoi(digits[:2])
		mi, _ := strconv.Atoi(digits[2:])
		if h > 23 || mi > 59 {
			return time.Time{}, true, fmt.Errorf("has a bad offset %s", zone)
		}
		off := time.Duration(h)*time.Hour + time.Duration(mi)*time.Minute
		if zone[0] == '-' {
			off = -off
		}
		return wall.Add(-off), true, nil
	case loc == nil:
		return time.Time{}, true, errors.New("has no zone: add Z or an offset (+01:00)")
	}
	t, err = inZone(wall, loc)
	return t, true, err
}

// inZone returns the instant whose wall clock in loc is wall (a time
// in UTC with those fields), or an error if loc's clocks skip it or
// show it twice.
func inZone(wall time.Time, loc *time.Location) (time.Time, error) {
	var found []time.Time
	for _, probe := range []time.Time{wall.Add(-24 * time.Hour), wall.Add(24 * time.Hour)} {
		_, off := probe.In(loc).Zone()
		t := wall.Add(-time.Duration(off) * time.Second)
		if _, o := t.In(loc).Zone(); o != off || slices.ContainsFunc(found, t.Equal) {
			continue
		}
		found = append(found, t)
	}
	name := loc.String()
	if loc == time.Local {
		name = "the local zone (TZ)"
	}
	switch len(found) {
	case 0:
		return time.Time{}, fmt.Errorf("does not exist in %s: its clocks skip it", name)
	case 2:
		return time.Time{}, fmt.Errorf("is ambiguous in %s: its clocks show it twice; add the offset (%s or %s)",
			name, found[0].In(loc).Format("-07:00"), found[1].In(loc).Format("-07:00"))
	}
	return found[0], nil
}

// parseEpoch reads "SECONDS[.FRACTION]" with 1 to 9 fraction digits.
func parseEpoch(s string) (time.Time, bool) {
	sec, frac, dot := strings.Cut(s, ".")
	if sec == "" || strings.ContainsAny(sec, "+-") || dot && (frac == "" || len(frac) > 9) {
		return time.Time{}, false
	}
	n, err := strconv.ParseInt(sec, 10, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return time.Time{}, false
	}
	// Far beyond the range (checked refuses it), where time.Unix
	// cannot overflow.
	n = min(n, maxTime.Unix()+1)
	var ns int64
	if dot {
		f, err := strconv.ParseUint(frac, 10, 32)
		if err != nil || strings.ContainsAny(frac, "+-") {
			return time.Time{}, false
		}
		ns = int64(f)
		for range 9 - len(frac) {
			ns *= 10
		}
	}
	return time.Unix(n, ns), true
}

// BlockRun is a run of index blocks First..Last (inclusive), numbered
// as the data file's index numbers them.
type BlockRun struct{ First, Last uint32 }

// validCommunityID reports whether s is a Community ID v1 in its base64
// form: "1:" and the base64 of 20 bytes (SHA-1).
func validCommunityID(s string) bool {
	rest, ok := strings.CutPrefix(s, "1:")
	if !ok || len(rest) != 28 {
		return false
	}
	b, err := base64.StdEncoding.DecodeString(rest)
	return err == nil && len(b) == 20
}
