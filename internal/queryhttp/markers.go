package queryhttp

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/pcapsync/pcapsync/internal/timeline"
)

// MarkersPath is the URL path of the timeline's markers: GET /markers,
// the console's GET /api/markers served to clients of the query
// listener (a federated console merges the servers').
const MarkersPath = "/markers"

// MaxMarkersSize is the most bytes FetchMarkers reads of an answer.
const MaxMarkersSize = 64 << 20

// serveMarkers answers GET /markers (authenticated already, its
// parameters read): the markers of the root over the timeline's
// parameters (ParseTimeline) as the console's GET /api/markers answers
// them: timeline.BuildMarkers over the root, timeline.StatusMarkers
// over the process's status (Config.Status) when it has one, by time;
// an error without the server's paths. It takes a query slot: it reads
// the files' indexes.
func (s *Server) serveMarkers(w http.ResponseWriter, r *http.Request, v url.Values, log *slog.Logger) {
	pats, since, until, step, release := s.timelineRequest(w, v, log)
	if release == nil {
		return
	}
	defer release()
	m, err := timeline.BuildMarkers(r.Context(), s.cfg.Dir, pats, since, until, step)
	if err != nil {
		m.Error = s.public(err)
	}
	if s.cfg.Status != nil {
		m.Markers = append(m.Markers, timeline.StatusMarkers(s.cfg.Status(), pats, since, until)...)
	}
	timeline.SortMarkers(m.Markers)
	if s.writeJSON(w, m, "markers", log) {
		log.Info("markers served", "markers", len(m.Markers))
	}
}

// writeJSON writes v as the JSON answer of what (TimelineType),
// counted; false when it failed or the client went away.
func (s *Server) writeJSON(w http.ResponseWriter, v any, what string, log *slog.Logger) bool {
	b, err := json.Marshal(v)
	if err != nil {
		s.Counters.Failed.Add(1)
		log.Warn(what+" failed", "err", err)
		http.Error(w, what+": "+err.Error(), http.StatusInternalServerError)
		return false
	}
	w.Header().Set("Content-Type", TimelineType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	out := &streamWriter{w: w, rc: http.NewResponseController(w), timeout: s.cfg.WriteTimeout, sent: &s.Counters.Bytes}
	if _, err := out.Write(append(b, '\n')); err != nil {
		s.Counters.Canceled.Add(1)
		return false
	}
	s.Counters.OK.Add(1)
	return true
}

// FetchMarkers asks the server's GET /markers (cfg.Addr, TLS, Token
// and DialTimeout) for the markers of v (ParseTimeline's parameters,
// sent as given) and returns them, decoded; at most MaxMarkersSize
// bytes. A refusal is as Fetch's; an answer that is not markers wraps
// ErrFailed.
func FetchMarkers(ctx context.Context, cfg ClientConfig, v url.Values) (timeline.Markers, error) {
	var m timeline.Markers
	err := fetchJSON(ctx, cfg, MarkersPath, v, "markers", MaxMarkersSize, &m)
	return m, err
}

// fetchJSON asks the server's GET path with v (sent as given) and
// decodes its JSON answer (TimelineType, at most max bytes) into out,
// its errors naming what. A refusal is as Fetch's; an answer that is
// not JSON wraps ErrFailed.
func fetchJSON(ctx context.Context, cfg ClientConfig, path string, v url.Values, what string, max int64, out any) error {
	cfg.Params, cfg.path, cfg.rawQuery = Params{}, path, v.Encode()
	resp, done, err := cfg.do(ctx, TimelineType)
	if err != nil {
		return err
	}
	defer done()
	if ct := resp.Header.Get("Content-Type"); ct != TimelineType {
		return fmt.Errorf("%s %s: answer of type %q, not %s: not a pcapsync query listener?", what, cfg.Addr, ct, TimelineType)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	switch {
	case err != nil:
		return fmt.Errorf("%w: %s: %w", ErrFailed, what, err)
	case int64(len(b)) > max:
		return fmt.Errorf("%w: %s of more than %d bytes", ErrFailed, what, max)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrFailed, what, err)
	}
	return nil
}

// timelineRequest reads a timeline's parameters (ParseTimeline) and
// takes a query slot for it, counted active; release gives both back.
// A refusal (400, 503) is answered here, release nil then.
func (s *Server) timelineRequest(w http.ResponseWriter, v url.Values, log *slog.Logger) (pats []string, since, until time.Time, step time.Duration, release func()) {
	pats, since, until, step, err := ParseTimeline(v, s.cfg.Dir, time.Now())
	if err != nil {
		s.refuse(w, log, http.StatusBadRequest, err.Error())
		return nil, since, until, 0, nil
	}
	if !s.takeSlot(w, log) {
		return nil, since, until, 0, nil
	}
	s.Counters.Active.Add(1)
	return pats, since, until, step, func() { s.Counters.Active.Add(-1); <-s.slots }
}
