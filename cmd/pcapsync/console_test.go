package main

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/console"
	"github.com/pcapsync/pcapsync/internal/flow"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/testutil/flowtest"
)

// TestConsoleListen: a collector with --console-listen serves the
// console of its root on loopback (plain HTTP there, as the query
// listener): a request without credentials is refused (401 for the
// API, the login page for a page), the --token-file token logs in,
// and the session's download of a selection equals pcapsync query's
// of the same selection, byte for byte.
func TestConsoleListen(t *testing.T) {
	dir := t.TempDir()
	ps := flowtest.GenPackets(flowtest.GenConvs(3, 10))
	flowtest.WriteRoot(t, dir, ps, []flowtest.Agent{{Name: "a", Iface: "a:eth0", PerFile: 50}, {Name: "b", Iface: "b:eth1", PerFile: 70}}, &flow.Config{})
	const token = "console-test-token-0123456789"
	tf := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tf, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stderr, done := runBackground(t, "collector", "--listen", "127.0.0.1:0", "--dir", dir, "--insecure", "--token-file", tf,
		"--console-listen", "127.0.0.1:0", "--shutdown-timeout", "100ms")
	re := regexp.MustCompile(`msg="collector listening" .* console=(\S+)`)
	var base string
	testutil.Eventually(t, 10*time.Second, func() error {
		select {
		case err := <-done:
			t.Fatalf("the collector stopped: %v\n%s", err, stderr.String())
		default:
		}
		m := re.FindStringSubmatch(stderr.String())
		if m == nil {
			return errors.New("no console listener logged yet")
		}
		base = "http://" + m[1]
		return nil
	})
	c := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := cookieGet(t, c, base)
	if resp, _ := get("/api/download?agent=a", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("download without credentials: %s; want 401", resp.Status)
	}
	if resp, _ := get("/flows", nil); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login" {
		t.Errorf("page without credentials: %s to %q; want 303 to /login", resp.Status, resp.Header.Get("Location"))
	}
	resp, err := c.Post(base+"/login", "application/x-www-form-urlencoded", strings.NewReader(url.Values{"token": {token}}.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var session *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == console.CookieName {
			session = ck
		}
	}
	if session == nil {
		t.Fatalf("login with --token-file's token: %s, no session cookie", resp.Status)
	}
	resp, got := get("/api/download?agent=a&since=2026-11-24T10:00:00.02Z", session)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Security-Policy") != console.CSP {
		t.Fatalf("download with the session: %s, CSP %q: %s", resp.Status, resp.Header.Get("Content-Security-Policy"), got)
	}
	want, se, err := queryRun("query", "--dir", dir, "--agent", "a", "--since", "2026-11-24T10:00:00.02Z", "-w", "-")
	if err != nil {
		t.Fatalf("pcapsync query: %v\n%s", err, se)
	}
	if len(got) < 100 || !bytes.Equal(got, []byte(want)) {
		t.Errorf("the console's download: %d bytes; pcapsync query of the same selection: %d", len(got), len(want))
	}
}

// cookieGet returns a GET of base+path through c, with the cookie ck
// when not nil: the answer and its whole body.
func cookieGet(t *testing.T, c *http.Client, base string) func(path string, ck *http.Cookie) (*http.Response, []byte) {
	return func(path string, ck *http.Cookie) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		if ck != nil {
			req.AddCookie(ck)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
}
