package queryhttp

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/query"
)

// rawQuery sends a request with the query string or body as given, not
// re-encoded, to the plain HTTP listener at addr, and returns its
// status and body.
func rawQuery(t *testing.T, addr, method, rawQuery, contentType, body string) (int, string) {
	t.Helper()
	u := "http://" + addr + Path
	if rawQuery != "" {
		u += "?" + rawQuery
	}
	req, err := http.NewRequestWithContext(context.Background(), method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// validCID is a Community ID of the right form, "1:" and 28 base64
// characters (the '=' escaped).
var validCID = "1:" + strings.Repeat("A", 27) + "%3D"

// TestParamsStrict: a parameter that does not parse (a bad escape, a
// ';', no '='), holds a NUL, is unknown or a time out of range is
// refused with 400 naming it, in the URL and in a POST body alike;
// never dropped (which widened the selection to everything) nor cut at
// the NUL (which ran "udp%00 and garbage" as "udp").
func TestParamsStrict(t *testing.T) {
	dir := writeFixture(t, 20, "a1", "a2")
	s := startServer(t, Config{Listen: "127.0.0.1:0", Dir: dir})
	for _, c := range []struct {
		query, want string
	}{
		{"agent=%ZZ", `parameter "agent=%ZZ": invalid URL escape "%ZZ"`},
		{"%ZZ=a1", `parameter "%ZZ=a1": invalid URL escape "%ZZ"`},
		{"agent=a1;count=1", `parameter "agent=a1;count=1": ';' separates no parameters`},
		{"agent=a1&count=1;", `parameter "count=1;": ';'`},
		{"filter=udp%00+and+garbage", `parameter "filter=udp%00+and+garbage": a NUL byte`},
		{"filter=%00", `parameter "filter=%00": a NUL byte`},
		{"iface=eth0%00x", `parameter "iface=eth0%00x": a NUL byte`},
		{"agent", `parameter "agent": no '='`},
		{"agent=a1&bogus=1", `unknown parameter "bogus"`},
		{"since=2300-01-01T00:00:00Z", `since: bad time: "2300-01-01T00:00:00Z" is out of range: want a time from 1677-09-21T00:12:43.145224192Z to 2262-04-11T23:47:16.854775807Z`},
		{"until=2262-04-12T00:00:00Z", `until: bad time: "2262-04-12T00:00:00Z" is out of range`},
		{"since=1600-01-01T00:00:00Z", `since: bad time: "1600-01-01T00:00:00Z" is out of range`},
		{"since=99999999999", `since: bad time: "99999999999" is out of range`},
		{"agent=" + strings.Repeat("x,", MaxPatterns+1), fmt.Sprintf("agent: %d patterns, at most %d", MaxPatterns+1, MaxPatterns)},
		{"community_id=1:abc", `community id "1:abc": want 1: and 28 base64 characters`},
		{"community_id=2:" + strings.Repeat("A", 27) + "%3D", `community id "2:`},
		{"community_id=1:" + strings.Repeat("%21", 28), `community id "1:!!!`},
		{"community_id=" + strings.Repeat("A", 100), "community_id of 100 bytes: want 1: and 28 base64 characters"},
		{"community_id=" + validCID + "&community_id=" + validCID, "community_id given 2 times"},
	} {
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			t.Run(method+" "+c.query[:min(len(c.query), 40)], func(t *testing.T) {
				var code int
				var body string
				if method == http.MethodGet {
					code, body = rawQuery(t, s.Addr(), method, c.query, "", "")
				} else {
					code, body = rawQuery(t, s.Addr(), method, "", formType, c.query)
				}
				if code != http.StatusBadRequest || !strings.Contains(body, c.want) {
					t.Errorf("%s %q: %d %.200q, want 400 with %q", method, c.query, code, body, c.want)
				}
			})
		}
	}
	// What stays accepted: empty pairs, '+' for a space, escapes.
	for _, q := range []string{"agent=a1&&count=1&", "filter=udp+and+not+port+9", "agent=a%31", "community_id=" + validCID} {
		if code, body := rawQuery(t, s.Addr(), http.MethodGet, q, "", ""); code != http.StatusOK {
			t.Errorf("GET %q: %d %.200q, want 200", q, code, body)
		}
	}
	// A POST's parameters go in its body, of the form type, bounded.
	for _, c := range []struct {
		name, query, ctype, body string
		code                     int
		want                     string
	}{
		{"query and body", "agent=a1", formType, "count=1", 400, "not in the URL"},
		{"other type", "", "application/json", `{"agent":"a1"}`, 415, formType},
		{"too long", "", formType, "filter=" + strings.Repeat("a", MaxParamBytes), 413, fmt.Sprintf("parameters of more than %d bytes", MaxParamBytes)},
	} {
		code, body := rawQuery(t, s.Addr(), http.MethodPost, c.query, c.ctype, c.body)
		if code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %.200q, want %d with %q", c.name, code, body, c.code, c.want)
		}
	}
	if code, body := rawQuery(t, s.Addr(), http.MethodPut, "", "", ""); code != http.StatusMethodNotAllowed || !strings.Contains(body, "POST") {
		t.Errorf("PUT: %d %q, want 405 naming GET and POST", code, body)
	}
}

// TestLongSelection: a selection of 10 000 agent globs runs over HTTPS
// (Fetch sends it in a POST's body) and gives what it gives here.
func TestLongSelection(t *testing.T) {
	dir := writeFixture(t, 50, "a1", "a2", "b1")
	certs := pkiDir(t)
	s := startServer(t, Config{Listen: "127.0.0.1:0", Dir: dir, TLS: serverTLS(t, certs), Token: token})
	var globs []string
	for i := range 10_000 {
		globs = append(globs, fmt.Sprintf("x%04d*", i))
	}
	globs = append(globs, "a?")
	p := Params{Agents: globs, Filter: "udp"}
	cfg, err := parseQuery(p.Values(), dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	want := localQuery(t, cfg)
	wantRes, _ := query.Run(context.Background(), cfg, io.Discard)
	if wantRes.Agents != 2 || wantRes.Packets != 100 {
		t.Fatalf("local: %+v, want 2 agents, 100 packets", wantRes)
	}
	var got bytes.Buffer
	res, err := Fetch(context.Background(), ClientConfig{Addr: s.Addr(), TLS: clientTLS(t, certs, certs, "viewer"), Token: token, Params: p}, &got)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) || !reflect.DeepEqual(res, wantRes) {
		t.Errorf("remote: %d bytes, %+v; local %d bytes, %+v", got.Len(), res, len(want), wantRes)
	}
	// Beyond MaxParamBytes, the client refuses before sending.
	big := Params{Filter: strings.Repeat("a", MaxParamBytes)}
	_, err = Fetch(context.Background(), ClientConfig{Addr: s.Addr(), TLS: clientTLS(t, certs, certs, "viewer"), Token: token, Params: big}, io.Discard)
	if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), fmt.Sprint("at most ", MaxParamBytes)) {
		t.Errorf("parameters of %d bytes: %v, want ErrBadRequest stating the limit", MaxParamBytes, err)
	}
}

// TestSlowBody: a POST whose body does not come within the handshake
// timeout is answered 400 and its connection closed, the slot never
// taken.
func TestSlowBody(t *testing.T) {
	s := startServer(t, Config{Listen: "127.0.0.1:0", Dir: t.TempDir(), HandshakeTimeout: 300 * time.Millisecond})
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nContent-Length: 100\r\n\r\nagent=a", Path, formType)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "reading the parameters") || !resp.Close {
		t.Errorf("%s %q (close %v), want 400 reading the parameters, closed", resp.Status, b, resp.Close)
	}
	if n := s.Counters.BadRequest.Load(); n != 1 {
		t.Errorf("bad request counter %d, want 1", n)
	}
}

// TestPostQueryOutlivesBodyDeadline: the deadline on a POST's body
// ends with the body; the query that follows runs on past it.
func TestPostQueryOutlivesBodyDeadline(t *testing.T) {
	s := startServer(t, Config{Listen: "127.0.0.1:0", Dir: t.TempDir(), HandshakeTimeout: 100 * time.Millisecond})
	s.run = func(ctx context.Context, _ *query.Prepared, w io.Writer) (query.Result, error) {
		select {
		case <-ctx.Done():
			return query.Result{}, ctx.Err()
		case <-time.After(500 * time.Millisecond): // past the body's deadline
		}
		w.Write([]byte("pcapng-ish"))
		return query.Result{Packets: 1}, nil
	}
	p := Params{Agents: strings.Split(strings.Repeat("a*,", MaxGetQuery/3), ",")} // sent as a POST
	res, err := Fetch(context.Background(), ClientConfig{Addr: s.Addr(), Params: p}, io.Discard)
	if err != nil || res.Packets != 1 {
		t.Fatalf("Fetch: %+v, %v", res, err)
	}
}

// TestParseQueryThreads: the queries GET /query (and the console) run
// take QueryThreads, one goroutine without read-ahead, not the
// default of pcapsync query (the CPUs): the listener's cores are the
// collector's.
func TestParseQueryThreads(t *testing.T) {
	cfg, err := ParseQuery(url.Values{"agent": {"a1"}}, t.TempDir(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Threads != QueryThreads || QueryThreads != 1 {
		t.Errorf("threads %d, want %d (1)", cfg.Threads, QueryThreads)
	}
}
