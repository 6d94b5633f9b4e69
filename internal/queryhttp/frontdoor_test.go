package queryhttp

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/query"
	"github.com/pcapsync/pcapsync/internal/testutil"
)

// rawGet sends a GET /query with the given Authorization header (none
// if "") on c and reads the answer.
func rawGet(t *testing.T, c net.Conn, auth string) *http.Response {
	t.Helper()
	req := "GET /query HTTP/1.1\r\nHost: pcapsync\r\n"
	if auth != "" {
		req += "Authorization: " + auth + "\r\n"
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// TestRefusalClosesConnection: a refused request is answered with
// Connection: close and the connection closed, so that a refused client
// cannot keep descriptors of the collector by re-sending requests on
// kept-alive connections.
func TestRefusalClosesConnection(t *testing.T) {
	s := startServer(t, Config{Listen: "127.0.0.1:0", Dir: t.TempDir(), Token: token})
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp := rawGet(t, c, "")
	if resp.StatusCode != http.StatusUnauthorized || !resp.Close {
		t.Fatalf("status %d, Connection: close %v; want 401 and close", resp.StatusCode, resp.Close)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("after the refusal: read %d bytes, %v; want the connection closed (EOF)", n, err)
	}
	testutil.EventuallyTrue(t, 5*time.Second, "no connection open", func() bool { return s.Conns().Open.Load() == 0 })
}

// TestBearerAnyCase: the scheme of the Authorization header is
// case-insensitive (RFC 7235): "bearer TOKEN" is accepted.
func TestBearerAnyCase(t *testing.T) {
	s := startServer(t, Config{Listen: "127.0.0.1:0", Dir: writeFixture(t, 10, "a1"), Token: token})
	for _, auth := range []string{"Bearer " + token, "bearer " + token, "BEARER  " + token} {
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		if resp := rawGet(t, c, auth); resp.StatusCode != http.StatusOK {
			t.Errorf("Authorization: %q: status %d, want 200", strings.Replace(auth, token, "TOKEN", 1), resp.StatusCode)
		}
		c.Close()
	}
}

// TestRefusalLogLimited: refusals are logged at most once per interval
// (with the count not logged), not once each.
func TestRefusalLogLimited(t *testing.T) {
	var log testutil.Buffer
	s := startServer(t, Config{Listen: "127.0.0.1:0", Dir: t.TempDir(), Token: token, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	const n = 50
	for range n {
		if _, err := Fetch(context.Background(), ClientConfig{Addr: s.Addr()}, io.Discard); !errors.Is(err, ErrRefused) {
			t.Fatalf("no token: %v, want refused", err)
		}
	}
	if got := s.Counters.Unauthorized.Load(); got != n {
		t.Fatalf("%d refusals counted, want %d", got, n)
	}
	// 50 requests take well under a second here; allow for a slow one.
	if lines := strings.Count(log.String(), "query refused"); lines < 1 || lines > 3 {
		t.Errorf("%d log lines for %d refusals, want one per second:\n%s", lines, n, log.String())
	}
}

// absolute finds an absolute path in an answer.
var absolute = regexp.MustCompile(`(^|[\s"'(=:])/[^\s/]`)

// TestNoServerPaths: the error in the trailer and the body of a 500
// name files relative to the output root, and no other path of the
// server at all; the log has the full error.
func TestNoServerPaths(t *testing.T) {
	dir := t.TempDir()
	var log testutil.Buffer
	s := startServer(t, Config{Listen: "127.0.0.1:0", Dir: dir, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	inRoot := fmt.Errorf("agent a1: open %s: %w", filepath.Join(dir, "a1", "x.pcapng"), query.ErrFileGone)
	outside := errors.New("reading /etc/pcapsync/some.conf: permission denied")
	for _, tt := range []struct {
		name    string
		err     error
		partial bool
		want    string
	}{
		{"trailer, in the root", inRoot, true, "open a1/x.pcapng"},
		{"500, in the root", inRoot, false, "open a1/x.pcapng"},
		{"trailer, elsewhere", outside, true, "the query failed on the server"},
		{"500, elsewhere", outside, false, "the query failed on the server"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s.run = func(_ context.Context, _ *query.Prepared, w io.Writer) (query.Result, error) {
				if tt.partial {
					w.Write([]byte("partial"))
				}
				return query.Result{}, tt.err
			}
			var out bytes.Buffer
			_, err := Fetch(context.Background(), ClientConfig{Addr: s.Addr()}, &out)
			if !errors.Is(err, ErrFailed) {
				t.Fatalf("Fetch: %v, want failed", err)
			}
			answer := strings.TrimPrefix(err.Error(), ErrFailed.Error())
			if absolute.MatchString(answer) || strings.Contains(answer, dir) || !strings.Contains(answer, tt.want) {
				t.Errorf("the client was told %q: want %q and no path of the server", answer, tt.want)
			}
			if !strings.Contains(log.String(), tt.err.Error()) {
				t.Errorf("the log lacks the full error %q", tt.err)
			}
		})
	}
}
