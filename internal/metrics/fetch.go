package metrics

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// MaxStatusSize is the most bytes FetchStatus reads of an answer.
const MaxStatusSize = 64 << 20

// FetchStatus asks the --metrics listener at addr (HOST:PORT) for its
// status (GET http://addr/status) until ctx ends. It returns the status
// decoded and the body as served. An address that makes no URL wraps
// ErrAddress; an answer that is not a collector's status wraps
// ErrNotStatus; otherwise the error is the request's.
func FetchStatus(ctx context.Context, addr string) (Status, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/status", nil)
	if err != nil {
		return Status{}, nil, fmt.Errorf("%w %q: %w", ErrAddress, addr, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Status{}, nil, fmt.Errorf("asking the collector: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxStatusSize+1))
	if err != nil {
		return Status{}, nil, fmt.Errorf("reading the collector's status: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return Status{}, nil, fmt.Errorf("%w: HTTP %s (is %s a collector's --metrics listener?)", ErrNotStatus, resp.Status, addr)
	}
	if len(body) > MaxStatusSize {
		return Status{}, nil, fmt.Errorf("%w: more than %d bytes", ErrNotStatus, MaxStatusSize)
	}
	var st Status
	if err := json.Unmarshal(body, &st); err != nil {
		return Status{}, nil, fmt.Errorf("%w: %w", ErrNotStatus, err)
	}
	if st.Agents == nil && st.Time.IsZero() {
		return Status{}, nil, ErrNotStatus
	}
	return st, body, nil
}
