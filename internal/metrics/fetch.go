package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"

	"github.com/pcapsync/pcapsync/internal/fielderr"
)

// MaxStatusSize is the most bytes FetchStatus reads of an answer.
const MaxStatusSize = 64 << 20

// FetchStatus asks the --metrics listener at addr (HOST:PORT) for its
// status (GET http://addr/status) until ctx ends. It returns the status
// decoded and the body as served. An address that makes no URL wraps
// ErrAddress; no connection, or no answer before ctx ends, wraps
// ErrNoAnswer; a connection that answers something other than HTTP
// wraps ErrNotHTTP; an HTTP answer that is not a collector's status
// wraps ErrNotStatus. Each names addr.
func FetchStatus(ctx context.Context, addr string) (Status, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/status", nil)
	if err != nil {
		return Status{}, nil, fmt.Errorf("%w %q: %w", ErrAddress, addr, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Status{}, nil, requestError(ctx, addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxStatusSize+1))
	if err != nil {
		return Status{}, nil, fmt.Errorf("reading the collector's status: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return Status{}, nil, fielderr.Errorf("%w: %s answered HTTP %s (a collector's or writer's {metrics.Addr} listener serves /status, an agent's does not)", ErrNotStatus, addr, resp.Status)
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

// requestError classifies the error of a status request to addr.
func requestError(ctx context.Context, addr string, err error) error {
	var op *net.OpError
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("%w at %s: no answer in time: %w", ErrNoAnswer, addr, ctx.Err())
	case errors.As(err, &op) && op.Op == "dial":
		return fmt.Errorf("%w at %s: %w", ErrNoAnswer, addr, op.Err)
	}
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		err = ue.Err // not the URL again: it holds addr
	}
	return fmt.Errorf("%s %w: %w", addr, ErrNotHTTP, err)
}
