package queryhttp

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"time"

	"github.com/pcapsync/pcapsync/internal/timeline"
)

// TimelinePath is the URL path of the timeline: GET /timeline, the
// console's GET /api/timeline served to clients of the query listener
// (a federated console merges the servers').
const TimelinePath = "/timeline"

// TimelineType is the media type of GET /timeline's answer: one
// timeline.Timeline as JSON.
const TimelineType = "application/json"

// MaxTimelineSize is the most bytes FetchTimeline reads of an answer.
const MaxTimelineSize = 256 << 20

// ParseTimeline reads the parameters of a timeline (GET /timeline, the
// console's GET /api/timeline): agent, since, until as GET /query reads
// them (ParseQuery), and step (a Go duration; default
// timeline.DefaultStep of the range). Without since, until and step,
// the range is the DefaultTimelineRange ending at the end of now's
// default step (both ends on whole steps). Its errors are the
// request's (a 400).
func ParseTimeline(v url.Values, dir string, now time.Time) (agents []string, since, until time.Time, step time.Duration, err error) {
	for k := range v {
		if k != "agent" && k != "since" && k != "until" && k != "step" {
			return nil, since, until, 0, fmt.Errorf("unknown parameter %q (want agent, since, until, step)", k)
		}
	}
	st := v["step"]
	delete(v, "step")
	if len(st) > 1 {
		return nil, since, until, 0, fmt.Errorf("step given %d times", len(st))
	}
	dflt := len(st) == 0 && len(v["since"]) == 0 && len(v["until"]) == 0
	cfg, err := parseQuery(v, dir, now)
	if err != nil {
		return nil, since, until, 0, err
	}
	since, until = cfg.Since, cfg.Until
	if until.IsZero() {
		until = now
	}
	if since.IsZero() {
		since = until.Add(-timeline.DefaultTimelineRange)
	}
	span := until.Sub(since)
	if span <= 0 || span == math.MaxInt64 {
		return nil, since, until, 0, fmt.Errorf("since %s is not before until %s", since.UTC().Format(time.RFC3339Nano), until.UTC().Format(time.RFC3339Nano))
	}
	if dflt {
		// The default range ends at the end of now's step, both ends
		// on whole steps: the intervals are the same for every request
		// within a step, and whole bins of the timeline summaries
		// (docs/console.md): read from them, not the indexes.
		step = timeline.DefaultStep(span)
		until = time.Unix(0, (until.UnixNano()/int64(step)+1)*int64(step)).UTC()
		since = until.Add(-timeline.DefaultTimelineRange)
		return cfg.Agents, since, until, step, nil
	}
	if len(st) == 1 {
		step, err = time.ParseDuration(st[0])
		if err != nil || step < time.Millisecond {
			return nil, since, until, 0, fmt.Errorf("step %q: want a duration of at least 1ms (10s, 1m, 1h)", st[0])
		}
		if n := (span + step - 1) / step; n > timeline.MaxPoints || n < 0 {
			return nil, since, until, 0, fmt.Errorf("step %s: %d intervals over %s, at most %d", step, n, span, timeline.MaxPoints)
		}
	} else {
		step = timeline.DefaultStep(span)
	}
	return cfg.Agents, since, until, step, nil
}

// serveTimeline answers GET /timeline (authenticated already, its
// parameters read): the timeline of the root over them
// (timeline.BuildTimeline), as the console's GET /api/timeline answers
// it, the names of unindexed files and an error without the server's
// paths. It takes a query slot: it reads the files' indexes.
func (s *Server) serveTimeline(w http.ResponseWriter, r *http.Request, v url.Values, log *slog.Logger) {
	pats, since, until, step, release := s.timelineRequest(w, v, log)
	if release == nil {
		return
	}
	defer release()
	start := time.Now()
	t, err := timeline.BuildTimeline(r.Context(), s.cfg.Dir, pats, since, until, step)
	if err != nil {
		t.Coverage.Error = s.public(err)
	}
	for i, n := range t.Coverage.Named {
		t.Coverage.Named[i] = s.public(fmt.Errorf("%s", n))
	}
	if s.writeJSON(w, t, "timeline", log) {
		log.Info("timeline served", "agents", t.Coverage.Agents, "files", t.Coverage.Files, "duration", time.Since(start).Round(time.Millisecond))
	}
}

// FetchTimeline asks the server's GET /timeline (cfg.Addr, TLS, Token
// and DialTimeout) for the timeline of v (ParseTimeline's parameters,
// sent as given) and returns it, decoded; at most MaxTimelineSize
// bytes. A refusal is as Fetch's; an answer that is not a timeline
// wraps ErrFailed.
func FetchTimeline(ctx context.Context, cfg ClientConfig, v url.Values) (timeline.Timeline, error) {
	var t timeline.Timeline
	err := fetchJSON(ctx, cfg, TimelinePath, v, "timeline", MaxTimelineSize, &t)
	return t, err
}
