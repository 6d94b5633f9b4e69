package timeline

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"path"
	"path/filepath"
	"slices"
	"time"

	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/layout"
)

// Marker kinds of GET /api/markers and GET /markers.
const (
	// MarkStop: an agent's last packet before nothing more was kept
	// for longer than a step (its file closed, the next one starting
	// later or none): capture stopped, or the traffic did.
	MarkStop = "stop"
	// MarkDisconnect: the process's status says the agent's latest
	// session ended then.
	MarkDisconnect = "disconnect"
	// MarkConnect: the status says the agent's latest session began
	// then.
	MarkConnect = "connect"
)

// Marker is one event on a timeline.
type Marker struct {
	Agent string    `json:"agent"`
	Time  time.Time `json:"time"`
	Kind  string    `json:"kind"`
	Text  string    `json:"text"`
	// Server is the server (HOST:PORT) whose root or status gave the
	// marker, in a federated console's answer; "" otherwise.
	Server string `json:"server,omitempty"`
}

// Markers is the answer of GET /api/markers and GET /markers.
type Markers struct {
	Since   time.Time `json:"since"`
	Until   time.Time `json:"until"`
	Markers []Marker  `json:"markers"`
	// Unknown counts the closed files whose packets' times neither
	// retention's index nor their own index gives: a stop there is not
	// known.
	Unknown int    `json:"unknown"`
	Error   string `json:"error,omitempty"`
}

// matchAny reports whether name matches one of pats (none: all).
func matchAny(pats []string, name string) bool {
	return len(pats) == 0 || slices.ContainsFunc(pats, func(p string) bool { ok, _ := path.Match(p, name); return ok })
}

// BuildMarkers is the stops of the agents of dir matching pats in
// [since, until): the last packet of a closed file (retention's
// index's times, else the file's own index) after which no file of
// the agent keeps anything for more than step: the end of each run of
// the agent's files, merged where they overlap or follow within step.
// A file being written ends no run: capture goes on. An error (the root
// unreadable, ctx done) comes with what was found.
func BuildMarkers(ctx context.Context, dir string, pats []string, since, until time.Time, step time.Duration) (Markers, error) {
	m := Markers{Since: since.UTC(), Until: until.UTC(), Markers: []Marker{}}
	names, err := layout.Agents(dir)
	if err != nil {
		return m, err
	}
	lo, hi := since.UnixNano(), until.UnixNano()
	for _, a := range names {
		if !matchAny(pats, a) {
			continue
		}
		files, err := layout.AgentFiles(dir, a)
		if err != nil {
			return m, err
		}
		type span struct {
			name        string
			first, last int64
			part        bool
		}
		var spans []span
		for _, f := range files {
			if err := ctx.Err(); err != nil {
				return m, err
			}
			s := span{name: filepath.Base(f.Path), first: f.First, last: f.Last, part: f.Part}
			if !f.Times {
				var ok bool
				if s.first, s.last, ok = indexTimes(f.Path); !ok {
					if !f.Part {
						m.Unknown++
					}
					continue
				}
			}
			spans = append(spans, s)
		}
		slices.SortStableFunc(spans, func(x, y span) int { return cmp.Compare(x.first, y.first) })
		// The spans merged where they overlap or follow within a step:
		// each merged run ends at a stop, its file the one whose packets
		// end it.
		var run *span
		stop := func(next int64) {
			if run == nil || run.part || run.last < lo || run.last >= hi {
				return
			}
			text := fmt.Sprintf("the last packet of %s (closed)", run.name)
			if next == math.MaxInt64 {
				text += "; nothing kept after it"
			} else {
				text += "; nothing kept until " + time.Unix(0, next).UTC().Format(time.RFC3339Nano)
			}
			m.Markers = append(m.Markers, Marker{Agent: a, Time: time.Unix(0, run.last).UTC(), Kind: MarkStop, Text: text})
		}
		for i := range spans {
			s := &spans[i]
			switch {
			case run != nil && s.first-run.last <= int64(step):
				if s.last >= run.last {
					run = s
				}
			default:
				stop(s.first)
				run = s
			}
		}
		stop(math.MaxInt64)
	}
	return m, nil
}

// indexTimes is the first and last packet time of the data file at p
// by its index's blocks; false without a usable index or a packet.
func indexTimes(p string) (first, last int64, ok bool) {
	ix, err := index.OpenSummary(p) // times only: no filters, no probes
	if err != nil {
		return 0, 0, false
	}
	first, last = math.MaxInt64, math.MinInt64
	for i := range ix.All {
		if b := &ix.All[i]; b.Packets > 0 {
			first, last = min(first, b.First), max(last, b.Last)
		}
	}
	return first, last, first <= last
}

// StatusMarkers are the connects and disconnects in [since, until) of
// the agents matching pats that status (metrics.Status, as JSON) gives:
// each agent's latest session's start and, if it ended, its end.
func StatusMarkers(status any, pats []string, since, until time.Time) []Marker {
	var st struct {
		Agents []struct {
			Name         string    `json:"name"`
			Since        time.Time `json:"connected_since"`
			Disconnected time.Time `json:"disconnected_at"`
			Address      string    `json:"address"`
		} `json:"agents"`
	}
	b, err := json.Marshal(status)
	if err != nil || json.Unmarshal(b, &st) != nil {
		return nil
	}
	in := func(t time.Time) bool { return !t.IsZero() && !t.Before(since) && t.Before(until) }
	var out []Marker
	for _, a := range st.Agents {
		if !matchAny(pats, a.Name) {
			continue
		}
		if in(a.Since) {
			out = append(out, Marker{Agent: a.Name, Time: a.Since.UTC(), Kind: MarkConnect, Text: "connected to this server from " + a.Address})
		}
		if in(a.Disconnected) {
			out = append(out, Marker{Agent: a.Name, Time: a.Disconnected.UTC(), Kind: MarkDisconnect, Text: "disconnected from this server"})
		}
	}
	return out
}

// SortMarkers orders m's markers by time, then agent, stably (a
// federated console's: then server order).
func SortMarkers(m []Marker) {
	slices.SortStableFunc(m, func(a, b Marker) int { return cmp.Or(a.Time.Compare(b.Time), cmp.Compare(a.Agent, b.Agent)) })
}
