package console

import (
	"bytes"
	"time"

	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/pcapsync/pcapsync/internal/pki"
	"github.com/pcapsync/pcapsync/internal/pki/pkitest"
)

// TestRefused: without a session every page redirects to the login and
// every API answers 401; a wrong token sets no cookie; the right one
// sets an HttpOnly, SameSite=Strict cookie that opens the API; nothing
// but the login takes a POST; every answer carries the CSP.
func TestRefused(t *testing.T) {
	fx := newFixture(t)
	for _, p := range []string{"/agents", "/flows", "/packets", "/"} {
		resp, _ := fx.get(t, p)
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login" {
			t.Errorf("GET %s without a session: %s to %q; want 303 to /login", p, resp.Status, resp.Header.Get("Location"))
		}
	}
	for _, p := range []string{"/api/agents", "/api/flows", "/api/packets", "/api/download"} {
		resp, body := fx.get(t, p)
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without a session: %s %q; want 401", p, resp.Status, body)
		}
		resp, _ = fx.get(t, p, &http.Cookie{Name: CookieName, Value: "forged"})
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s with a forged session: %s; want 401", p, resp.Status)
		}
	}
	if resp := fx.login(t, "wrong"); len(resp.Cookies()) != 0 || resp.Header.Get("Location") != "/login?failed=1" {
		t.Errorf("wrong token: cookies %v, to %q", resp.Cookies(), resp.Header.Get("Location"))
	}
	resp := fx.login(t, testToken)
	cs := resp.Cookies()
	if len(cs) != 1 || cs[0].Name != CookieName || !cs[0].HttpOnly || cs[0].SameSite != http.SameSiteStrictMode || len(cs[0].Value) < 43 {
		t.Fatalf("login: cookies %+v; want one HttpOnly SameSite=Strict session of 32 random bytes", cs)
	}
	resp, body := fx.get(t, "/api/agents", cs[0])
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"name":"a"`) {
		t.Errorf("GET /api/agents with the session: %s %s", resp.Status, body)
	}
	for _, h := range []string{"Content-Security-Policy", "X-Content-Type-Options", "Referrer-Policy"} {
		if resp.Header.Get(h) == "" {
			t.Errorf("no %s header", h)
		}
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") || strings.Contains(csp, "unsafe-inline") {
		t.Errorf("CSP %q", csp)
	}
	req, _ := http.NewRequest(http.MethodPost, fx.base+"/api/agents", nil)
	req.AddCookie(cs[0])
	if r, err := noRedirect.Do(req); err != nil || r.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /api/agents: %v %v; want 405", r, err)
	}
	for _, q := range []string{"count=0", "count=10001", "count=x", "count=1&count=2", "since=yesterday", "agent=../etc", "a;b=1"} {
		resp, body = fx.get(t, "/api/packets?"+q, cs[0])
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `"error"`) {
			t.Errorf("GET /api/packets?%s: %s %s; want 400 with the reason", q, resp.Status, body)
		}
	}
	for _, q := range []string{"", "index=-1", "index=x", "index=10000", "index=1&index=2", "index=1&count=2", "index=1&bogus=1"} {
		resp, body = fx.get(t, "/api/packet?"+q, cs[0])
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `"error"`) {
			t.Errorf("GET /api/packet?%s: %s %s; want 400 with the reason", q, resp.Status, body)
		}
	}
	if resp, body = fx.get(t, "/api/packet?index=9999&agent=a", cs[0]); resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "no packet 9999") {
		t.Errorf("GET /api/packet past the selection: %s %s; want 404 saying so", resp.Status, body)
	}
	resp, body = fx.get(t, "/api/flows?bogus=1", cs[0])
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `unknown parameter`) {
		t.Errorf("GET /api/flows?bogus=1: %s %s; want GET /flows's 400", resp.Status, body)
	}
}

// TestClientCertificate: behind a TLS front door that asks for client
// certificates, one signed by the collector's CA opens the console
// without a login; none, or a foreign one, gets 401 and the login;
// a login over TLS sets a Secure cookie.
func TestClientCertificate(t *testing.T) {
	p := pkitest.New(t)
	fx := newFixtureTLS(t, p.Server(t, true))
	own, ownKey := p.Issue(t, p.CA, "user", pki.Leaf{CommonName: "user", Client: true})
	foreign, foreignKey := p.Issue(t, p.Foreign, "mallory", pki.Leaf{CommonName: "mallory", Client: true})
	for _, c := range []struct {
		name      string
		cert, key string
		want      int
	}{
		{"own CA", own, ownKey, http.StatusOK},
		{"none", "", "", http.StatusUnauthorized},
		{"foreign CA", foreign, foreignKey, http.StatusUnauthorized},
	} {
		cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: p.RawClient(t, c.cert, c.key)}}
		resp, err := cl.Get(fx.base + "/api/agents")
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("client certificate %s: %s; want %d", c.name, resp.Status, c.want)
		}
	}
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: p.RawClient(t, "", "")},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := cl.Post(fx.base+"/login", "application/x-www-form-urlencoded", strings.NewReader("token="+testToken))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if cs := resp.Cookies(); len(cs) != 1 || !cs[0].Secure {
		t.Errorf("login over TLS: cookies %+v; want one Secure", cs)
	}
}

// TestBusy: an API request past MaxQueries reading the root at once is
// answered 503 with Retry-After; the pages are not counted.
func TestBusy(t *testing.T) {
	h, err := New(Config{Dir: t.TempDir(), MaxQueries: 1})
	if err != nil {
		t.Fatal(err)
	}
	h.slots <- struct{}{} // one request reading
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/agents", nil))
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Errorf("second request: %d %q; want 503 with Retry-After", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/agents", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("the agents page while busy: %d", rec.Code)
	}
	<-h.slots
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/agents", nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"agents":[]`) {
		t.Errorf("an empty root's agents: %d %s", rec.Code, rec.Body)
	}
}

// TestNoInline: the embedded pages carry no inline script, style
// element, style attribute or event handler attribute: the CSP would
// block them (TestBrowser sees that no violation happens).
func TestNoInline(t *testing.T) {
	bad := regexp.MustCompile(`(?i)<style|\sstyle\s*=|\son[a-z]+\s*=|javascript:`)
	script := regexp.MustCompile(`(?is)<script([^>]*)>(.*?)</script>`)
	pages, err := fs.Glob(assets, "assets/*.html")
	if err != nil || len(pages) < 4 {
		t.Fatalf("pages %v: %v", pages, err)
	}
	for _, p := range pages {
		b, _ := assets.ReadFile(p)
		if m := bad.Find(b); m != nil {
			t.Errorf("%s: %q", p, m)
		}
		if bytes.Count(b, []byte("<script")) != len(script.FindAll(b, -1)) {
			t.Errorf("%s: a script element not closed as <script ...></script>", p)
		}
		for _, m := range script.FindAllSubmatch(b, -1) {
			if !bytes.Contains(m[1], []byte(" src=")) || len(bytes.TrimSpace(m[2])) > 0 {
				t.Errorf("%s: inline script %q", p, m[0])
			}
		}
	}
}

// TestSessionsBounded: past MaxSessions live sessions a login is
// refused (503); once one has expired, a login takes its place.
func TestSessionsBounded(t *testing.T) {
	h, err := New(Config{Dir: t.TempDir(), Token: testToken, MaxSessions: 1, SessionTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	login := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader("token="+testToken))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		h.ServeHTTP(rec, req)
		return rec
	}
	if rec := login(); rec.Code != http.StatusSeeOther || len(rec.Result().Cookies()) != 1 {
		t.Fatalf("first login: %d %v", rec.Code, rec.Result().Cookies())
	}
	if rec := login(); rec.Code != http.StatusServiceUnavailable || len(rec.Result().Cookies()) != 0 {
		t.Errorf("login past MaxSessions: %d %v; want 503 without a cookie", rec.Code, rec.Result().Cookies())
	}
	h.mu.Lock()
	for id := range h.sessions {
		h.sessions[id] = time.Now().Add(-time.Second) // expired
	}
	h.mu.Unlock()
	if rec := login(); rec.Code != http.StatusSeeOther || len(rec.Result().Cookies()) != 1 {
		t.Errorf("login after the session expired: %d", rec.Code)
	}
}
