package queryhttp

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/pcapsync/pcapsync/internal/flowquery"
	"github.com/pcapsync/pcapsync/internal/query"
)

// DefaultDialTimeout bounds connecting and the TLS handshake of Fetch.
const DefaultDialTimeout = 10 * time.Second

// ClientConfig is one remote query.
type ClientConfig struct {
	// Addr is the server's query listener, HOST:PORT.
	Addr string
	// TLS, if set, is spoken (pki.ClientConfig: the server's CA, the
	// client's certificate); its ServerName defaults to Addr's host.
	// nil: plain HTTP.
	TLS *tls.Config
	// Token, if set, is sent as "Authorization: Bearer TOKEN".
	Token  string
	Params Params
	// Flows asks GET /flows (FetchFlows) instead of GET /query.
	Flows bool
	// DialTimeout bounds connecting and the TLS handshake; 0 means
	// DefaultDialTimeout. The query itself has no time limit but ctx.
	DialTimeout time.Duration

	path     string // the URL path when not Path or FlowsPath (FetchStatus, FetchTimeline)
	rawQuery string // with path: its query (FetchTimeline)
}

// URL returns the query's URL, its parameters in the query (as a GET
// sends them).
func (c ClientConfig) URL() string {
	u := url.URL{Scheme: "https", Host: c.Addr, Path: Path, RawQuery: c.Params.Values().Encode()}
	if c.Flows {
		u.Path = FlowsPath
	}
	if c.path != "" {
		u.Path, u.RawQuery = c.path, c.rawQuery
	}
	if c.TLS == nil {
		u.Scheme = "http"
	}
	return u.String()
}

// request is the query's request: a GET, or a POST with the
// parameters in its body when they are longer than MaxGetQuery (a
// server's headers are bounded), refused here beyond MaxParamBytes.
func (c ClientConfig) request(ctx context.Context) (*http.Request, error) {
	q := c.Params.Values().Encode()
	if len(q) <= MaxGetQuery {
		return http.NewRequestWithContext(ctx, http.MethodGet, c.URL(), nil)
	}
	if len(q) > MaxParamBytes {
		return nil, fmt.Errorf("%w: parameters of %d bytes, at most %d", ErrBadRequest, len(q), MaxParamBytes)
	}
	u := ClientConfig{Addr: c.Addr, TLS: c.TLS, Flows: c.Flows}.URL()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(q))
	if err == nil {
		req.Header.Set("Content-Type", formType)
	}
	return req, err
}

// Fetch runs the query cfg on the server and copies the pcapng it
// streams to w, byte for byte, and returns the server's Result (its
// Pcapsync-Result trailer). A refusal wraps ErrRefused, or ErrBadRequest
// for a 400, with the server's reason; a query that failed on the
// server after its stream began wraps ErrFailed with the server's error
// (w then holds a valid pcapng of what was written, as a local query's
// output does), as does a stream cut off before its end.
func Fetch(ctx context.Context, cfg ClientConfig, w io.Writer) (query.Result, error) {
	a, err := Open(ctx, cfg)
	if err != nil {
		return query.Result{}, err
	}
	defer a.Close()
	if _, err := io.Copy(errWriter{w}, a.Body); err != nil {
		var we *writeError
		if errors.As(err, &we) {
			return query.Result{}, we.err
		}
		return query.Result{}, fmt.Errorf("%w: the stream was cut off: %w", ErrFailed, err)
	}
	return a.Result()
}

// Answer is a query's answer as it streams: Body the pcapng, then
// Result. Close it.
type Answer struct {
	// Body is the pcapng the server streams; an error reading it is
	// the stream cut off (or ctx's end).
	Body io.Reader
	resp *http.Response
	done func()
}

// Open runs the query cfg on the server and returns its answer once
// the server accepted it (its headers came), refusals as Fetch's.
func Open(ctx context.Context, cfg ClientConfig) (*Answer, error) {
	resp, done, err := cfg.do(ctx, ContentType)
	if err != nil {
		return nil, err
	}
	if ct := resp.Header.Get("Content-Type"); ct != ContentType {
		done()
		return nil, fmt.Errorf("query %s: answer of type %q, not %s: not a pcapsync query listener?", cfg.Addr, ct, ContentType)
	}
	return &Answer{Body: resp.Body, resp: resp, done: done}, nil
}

// Result returns the server's Result once Body is read to its end:
// its Pcapsync-Result trailer, as decoded. A query that failed on the
// server (its Pcapsync-Error trailer), and an answer without a result
// or with one that does not decode, wrap ErrFailed.
func (a *Answer) Result() (query.Result, error) {
	var res query.Result
	var err error
	if msg := a.resp.Trailer.Get(TrailerError); msg != "" {
		err = fmt.Errorf("%w: %s", ErrFailed, msg)
	}
	rj := a.resp.Trailer.Get(TrailerResult)
	if rj == "" {
		return res, errors.Join(err, fmt.Errorf("%w: the stream ended without the server's result", ErrFailed))
	}
	if jerr := json.Unmarshal([]byte(rj), &res); jerr != nil {
		if len(rj) > 256 {
			rj = rj[:256] + "..."
		}
		return res, errors.Join(err, fmt.Errorf("%w: the server's result %q: %w", ErrFailed, rj, jerr))
	}
	return res, err
}

// Close ends the answer (the connection closed if Body is not read to
// its end).
func (a *Answer) Close() { a.done() }

// errWriter marks the errors of w.
type errWriter struct{ w io.Writer }

func (e errWriter) Write(p []byte) (int, error) {
	n, err := e.w.Write(p)
	if err != nil {
		err = &writeError{fmt.Errorf("writing the output: %w", err)}
	}
	return n, err
}

// writeError is an error of Fetch's writer, told apart from the
// stream's.
type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }

// do sends cfg's request, accepting ctype, and returns the answer of a
// 200 (done closes it); a refusal wraps ErrRefused, ErrBadRequest or
// ErrFailed with the server's reason.
func (cfg ClientConfig) do(ctx context.Context, ctype string) (*http.Response, func(), error) {
	if _, _, err := net.SplitHostPort(cfg.Addr); err != nil {
		return nil, nil, fmt.Errorf("server address %q: want HOST:PORT: %w", cfg.Addr, err)
	}
	dial := cfg.DialTimeout
	if dial == 0 {
		dial = DefaultDialTimeout
	}
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: dial}).DialContext,
		TLSClientConfig:     cfg.TLS,
		TLSHandshakeTimeout: dial,
		DisableCompression:  true, // the bytes as the server wrote them
		DisableKeepAlives:   true,
	}
	req, err := cfg.request(ctx)
	if err != nil {
		tr.CloseIdleConnections()
		return nil, nil, err
	}
	if cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+cfg.Token)
	}
	req.Header.Set("Accept", ctype)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		tr.CloseIdleConnections()
		return nil, nil, fmt.Errorf("query %s: %w", cfg.Addr, err)
	}
	done := func() { resp.Body.Close(); tr.CloseIdleConnections() }
	if resp.StatusCode != http.StatusOK {
		defer done()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		reason := strings.Join(strings.Fields(string(b)), " ")
		if reason == "" {
			reason = resp.Status
		}
		sentinel := ErrRefused
		switch {
		case resp.StatusCode == http.StatusBadRequest:
			sentinel = ErrBadRequest
		case resp.StatusCode >= 500 && resp.StatusCode != http.StatusServiceUnavailable:
			sentinel = ErrFailed
		}
		return nil, nil, fmt.Errorf("%w (%s): %s", sentinel, resp.Status, reason)
	}
	return resp, done, nil
}

// FetchFlows asks the server's GET /flows for cfg's selection (cfg.Flows
// is implied), calls fn with each flow, in the server's order, and
// returns the server's result (its Pcapsync-Result trailer). A refusal
// is as Fetch's; an answer cut off, a line that is not a flow, and an
// answer without a result that decodes (or one over MaxFlowsResult
// bytes) wrap ErrFailed.
func FetchFlows(ctx context.Context, cfg ClientConfig, fn func(*flowquery.JSON) error) (FlowsResult, error) {
	var res FlowsResult
	cfg.Flows = true
	resp, done, err := cfg.do(ctx, FlowsType)
	if err != nil {
		return res, err
	}
	defer done()
	if ct := resp.Header.Get("Content-Type"); ct != FlowsType {
		return res, fmt.Errorf("flows %s: answer of type %q, not %s: not a pcapsync query listener?", cfg.Addr, ct, FlowsType)
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var j flowquery.JSON
		err := dec.Decode(&j)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return res, fmt.Errorf("%w: flows: %w", ErrFailed, err)
		}
		if err := fn(&j); err != nil {
			return res, err
		}
	}
	rj := resp.Trailer.Get(TrailerResult)
	switch {
	case rj == "":
		return res, fmt.Errorf("%w: flows: the stream ended without the server's result", ErrFailed)
	case len(rj) > MaxFlowsResult:
		return res, fmt.Errorf("%w: flows: the server's result is %d bytes, at most %d", ErrFailed, len(rj), MaxFlowsResult)
	}
	if err := json.Unmarshal([]byte(rj), &res); err != nil {
		return res, fmt.Errorf("%w: flows: the server's result: %w", ErrFailed, err)
	}
	return res, nil
}
