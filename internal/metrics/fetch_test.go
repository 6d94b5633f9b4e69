package metrics

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestFetchStatus(t *testing.T) {
	good := `{"time":"2026-01-02T03:04:05Z","rate_window_seconds":10,"agents":[{"name":"web1"}]}`
	tests := []struct {
		name string
		code int
		body string
		err  error  // what the error wraps; nil for none
		text string // in the error
	}{
		{"status", http.StatusOK, good, nil, ""},
		{"no agents yet", http.StatusOK, `{"time":"2026-01-02T03:04:05Z","agents":[]}`, nil, ""},
		{"not found", http.StatusNotFound, "404 page not found\n", ErrNotStatus, "HTTP 404 Not Found"},
		{"not JSON", http.StatusOK, "# HELP up\n", ErrNotStatus, "invalid character"},
		{"JSON, not a status", http.StatusOK, `{"status":"ok"}`, ErrNotStatus, ""},
		// Valid JSON but for its size: only the limit refuses it.
		{"oversized", http.StatusOK, good[:len(good)-1] + strings.Repeat(" ", MaxStatusSize) + "}", ErrNotStatus, "more than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodGet || r.URL.Path != "/status" {
					http.NotFound(w, r)
					return
				}
				w.WriteHeader(tt.code)
				w.Write([]byte(tt.body))
			}))
			t.Cleanup(srv.Close)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			st, body, err := FetchStatus(ctx, srv.Listener.Addr().String())
			if tt.err != nil {
				if !errors.Is(err, tt.err) || !strings.Contains(err.Error(), tt.text) {
					t.Fatalf("error %v, want one wrapping %q and saying %q", err, tt.err, tt.text)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(body, []byte(tt.body)) {
				t.Errorf("body %q, want it as served: %q", body, tt.body)
			}
			if st.Time.IsZero() || st.Agents == nil {
				t.Errorf("decoded %+v", st)
			}
		})
	}
}

func TestFetchStatusBadAddress(t *testing.T) {
	_, _, err := FetchStatus(context.Background(), "bad host:1")
	if !errors.Is(err, ErrAddress) || !strings.Contains(err.Error(), `"bad host:1"`) {
		t.Fatalf("error %v, want one wrapping ErrAddress naming the address", err)
	}
}

// TestConfigErrors: every error of Validate matches ErrConfig.
func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{{Pprof: true}, {Addr: "127.0.0.1:0", MaxAgents: -2}} {
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("Validate(%+v) = %v, want an error matching ErrConfig", c, err)
		}
	}
	if err := (&Config{Addr: "127.0.0.1:0", Pprof: true, MaxAgents: -1}).Validate(); err != nil {
		t.Errorf("Validate of a good config: %v", err)
	}
}
