package queryhttp

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
)

// StatusPath is the URL path of the process's status: GET /status, the
// JSON its metrics listener serves at the same path (Config.Status).
const StatusPath = "/status"

// StatusType is the media type of GET /status's answer.
const StatusType = "application/json"

// MaxStatusSize is the most bytes FetchStatus reads of an answer.
const MaxStatusSize = 64 << 20

// serveStatus answers GET /status (authenticated already) with
// Config.Status as JSON, indented as the metrics listener writes it. It
// takes no query slot: it reads counters only.
func (s *Server) serveStatus(w http.ResponseWriter, r *http.Request, log *slog.Logger) {
	switch {
	case s.cfg.Status == nil:
		s.refuse(w, log, http.StatusNotFound, "this listener serves no status")
		return
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		w.Header().Set("Allow", "GET, HEAD")
		s.refuse(w, log, http.StatusMethodNotAllowed, "the status is GET "+StatusPath)
		return
	case r.URL.RawQuery != "":
		s.refuse(w, log, http.StatusBadRequest, "GET "+StatusPath+" takes no parameters")
		return
	}
	b, err := json.MarshalIndent(s.cfg.Status(), "", "  ")
	if err != nil {
		log.Warn("status failed", "err", err)
		http.Error(w, "status: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", StatusType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	if r.Method == http.MethodHead {
		return
	}
	w.Write(append(b, '\n'))
}

// FetchStatus asks the server's GET /status (cfg.Addr, TLS, Token and
// DialTimeout; Params and Flows unused) and returns the JSON it serves,
// at most MaxStatusSize bytes, as sent. A refusal is as Fetch's; an
// answer that is not JSON, or is larger, wraps ErrFailed.
func FetchStatus(ctx context.Context, cfg ClientConfig) ([]byte, error) {
	cfg.Params, cfg.path = Params{}, StatusPath
	resp, done, err := cfg.do(ctx, StatusType)
	if err != nil {
		return nil, err
	}
	defer done()
	if ct := resp.Header.Get("Content-Type"); ct != StatusType {
		return nil, fmt.Errorf("status %s: answer of type %q, not %s: not a pcapsync query listener?", cfg.Addr, ct, StatusType)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxStatusSize+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: status: %w", ErrFailed, err)
	case len(b) > MaxStatusSize:
		return nil, fmt.Errorf("%w: status of more than %d bytes", ErrFailed, MaxStatusSize)
	case !json.Valid(b):
		return nil, fmt.Errorf("%w: status: not JSON", ErrFailed)
	}
	return b, nil
}
