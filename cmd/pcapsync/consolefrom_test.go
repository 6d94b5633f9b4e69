package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/pcapsync/pcapsync/internal/flow"
	"github.com/pcapsync/pcapsync/internal/flowquery"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/pki"
	"github.com/pcapsync/pcapsync/internal/pki/pkitest"
	"github.com/pcapsync/pcapsync/internal/query"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/testutil/flowtest"
)

// consoleFrom is a pcapsync console --from over two query listeners
// (agent a's root, agent b's) and the address of a third, stopped.
type consoleFrom struct {
	roots [2]string
	addrs [3]string
	base  string
	token string
}

// startConsoleFrom writes the two roots, serves them (with the TLS
// configuration tc, nil: plain) and runs pcapsync console --from them
// and a stopped server, with the server flags of args (its
// --login-token-file added when args has no --listen-cert).
func startConsoleFrom(t *testing.T, tc *tls.Config, args ...string) *consoleFrom {
	t.Helper()
	cf := &consoleFrom{token: "console-from-token-0123456789"}
	ps := flowtest.GenPackets(flowtest.GenConvs(4, 10))
	for i, a := range []flowtest.Agent{{Name: "a", Iface: "a:eth0", PerFile: 50}, {Name: "b", Iface: "b:eth1", PerFile: 30}} {
		cf.roots[i] = t.TempDir()
		flowtest.WriteRoot(t, cf.roots[i], ps, []flowtest.Agent{a}, &flow.Config{})
		cf.addrs[i] = startQueryServer(t, cf.roots[i], "127.0.0.1:0", tc)
	}
	cf.addrs[2] = stoppedServer(t)
	if len(args) == 0 {
		tf := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(tf, []byte(cf.token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		args = []string{"--insecure", "--listen", "127.0.0.1:0", "--login-token-file", tf}
	}
	stderr, done := runBackground(t, append([]string{"console", "--from", strings.Join(cf.addrs[:], ","), "--server-timeout", "5s"}, args...)...)
	re := regexp.MustCompile(`msg="console serving" url=(\S+)/ `)
	testutil.Eventually(t, 10*time.Second, func() error {
		select {
		case err := <-done:
			t.Fatalf("pcapsync console stopped: %v\n%s", err, stderr.String())
		default:
		}
		m := re.FindStringSubmatch(stderr.String())
		if m == nil {
			return errors.New("no console listener logged yet")
		}
		cf.base = m[1]
		return nil
	})
	return cf
}

// TestConsoleFromTLS: pcapsync console --from servers that require a
// client certificate (--tls-ca, --tls-cert, --tls-key), serving HTTPS
// (--listen-cert, --listen-key) to browsers with a client certificate
// of --listen-client-ca, admitted without a login; one without is
// refused (401).
func TestConsoleFromTLS(t *testing.T) {
	p := pkitest.New(t)
	viewer, viewerKey := p.Issue(t, p.CA, "viewer", pki.Leaf{CommonName: "viewer", Client: true})
	user, userKey := p.Issue(t, p.CA, "user", pki.Leaf{CommonName: "user", Client: true})
	cf := startConsoleFrom(t, p.Server(t, true), "--tls-ca", p.CAFile, "--tls-cert", viewer, "--tls-key", viewerKey,
		"--listen", "127.0.0.1:0", "--listen-cert", p.ServerCert, "--listen-key", p.ServerKey, "--listen-client-ca", p.CAFile)
	if !strings.HasPrefix(cf.base, "https://") {
		t.Fatalf("console at %s, want HTTPS", cf.base)
	}
	for _, tc := range []struct {
		name       string
		cert, key  string
		code, want int // status, agents
	}{
		{"client certificate", user, userKey, http.StatusOK, 2},
		{"none", "", "", http.StatusUnauthorized, 0},
	} {
		c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: p.Client(t, p.CAFile, tc.cert, tc.key, "127.0.0.1")}}
		resp, err := c.Get(cf.base + "/api/agents")
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var ag struct {
			Agents []json.RawMessage `json:"agents"`
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		json.Unmarshal(b, &ag)
		if resp.StatusCode != tc.code || len(ag.Agents) != tc.want {
			t.Errorf("%s: %s, %d agents (%s); want %d and %d agents", tc.name, resp.Status, len(ag.Agents), b, tc.code, tc.want)
		}
	}
}

// TestConsoleFrom: pcapsync console --from over two servers and a
// third stopped refuses a request without credentials (401 for the
// API, the login page for a page), logs in with --login-token-file's
// token, and answers from the two: the agents of both with their
// servers and the stopped one down, a download of both servers'
// packets saying the stopped one is missing.
func TestConsoleFrom(t *testing.T) {
	cf := startConsoleFrom(t, nil)
	c := &http.Client{Timeout: 20 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := cookieGet(t, c, cf.base)
	if resp, _ := get("/api/agents", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /api/agents without a session: %s, want 401", resp.Status)
	}
	if resp, _ := get("/agents", nil); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login" {
		t.Errorf("GET /agents without a session: %s to %q, want 303 to /login", resp.Status, resp.Header.Get("Location"))
	}
	resp, err := c.PostForm(cf.base+"/login", url.Values{"token": {cf.token}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(resp.Cookies()) == 0 {
		t.Fatalf("login: %s, no session cookie", resp.Status)
	}
	ck := resp.Cookies()[0]
	resp, body := get("/api/agents", ck)
	var ag struct {
		Agents []struct {
			Name   string `json:"name"`
			Server string `json:"server"`
		} `json:"agents"`
		Servers []struct {
			Server, Outcome string
		} `json:"servers"`
	}
	if err := json.Unmarshal(body, &ag); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("agents: %s %v: %s", resp.Status, err, body)
	}
	if len(ag.Agents) != 2 || ag.Agents[0].Server != cf.addrs[0] || ag.Agents[1].Server != cf.addrs[1] ||
		len(ag.Servers) != 3 || ag.Servers[2].Outcome != "unreachable" || ag.Servers[0].Outcome != "ok" {
		t.Errorf("agents: %s", body)
	}
	resp, body = get("/api/download", ck)
	r, err := pcapfile.NewReader(bytes.NewReader(body), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("download: %s %v", resp.Status, err)
	}
	var n, want int64
	var p pcapfile.Packet
	for r.ReadInto(&p) == nil {
		n++
	}
	for _, root := range cf.roots {
		res, err := query.Run(context.Background(), query.Config{Dir: root}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		want += res.Packets
	}
	if com := strings.Join(r.SectionComments(), "\n"); n != want || want == 0 || !strings.Contains(com, "partial: server "+cf.addrs[2]) {
		t.Errorf("download: %d packets, want %d; comment %q", n, want, com)
	}
}

// TestConsoleFromUsage: what pcapsync console cannot serve is a usage
// error (exit status 2), before anything is asked.
func TestConsoleFromUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in the error
	}{
		{[]string{"--listen", "127.0.0.1:0", "--insecure"}, "--from or --servers"},
		{[]string{"--from", "127.0.0.1:1", "--insecure"}, "--listen HOST:PORT"},
		{[]string{"--from", "127.0.0.1:1", "--insecure", "--listen", "0.0.0.0:0"}, "--listen-insecure"},
		{[]string{"--from", "127.0.0.1:1", "--insecure", "--listen", "127.0.0.1:0", "--listen-cert", "x"}, "go together"},
		{[]string{"--from", "127.0.0.1:1", "--insecure", "--listen", "127.0.0.1:0", "--listen-client-ca", "x"}, "--listen-client-ca needs"},
		{[]string{"--from", "127.0.0.1:1", "--insecure", "--listen", "nonsense"}, "want HOST:PORT"},
		{[]string{"--from", "127.0.0.1:1", "--insecure", "--listen", "127.0.0.1:0", "--server-timeout", "0s"}, "--server-timeout"},
		{[]string{"--from", "127.0.0.1:1", "--insecure", "--listen", "127.0.0.1:0", "--login-token-file", "/nonexistent"}, "--login-token-file"},
	} {
		var so, se bytes.Buffer
		if code := execute(context.Background(), append([]string{"console"}, tc.args...), &so, &se); code != 2 || !strings.Contains(se.String(), tc.want) {
			t.Errorf("console %q: exit %d, %q; want 2 and %q", tc.args, code, se.String(), tc.want)
		}
	}
}

// TestBrowserConsoleFrom: in headless Chromium, pcapsync console
// --from over two servers and a third stopped: the login, the agents
// page lists both servers' agents with their servers and a row and a
// banner for the one down, the flows page shows the second server's
// flows with its name, the timeline and packets pages load; no page
// meets an error.
func TestBrowserConsoleFrom(t *testing.T) {
	exe, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("PCAPSYNC_E2E_REQUIRE") == "1" {
			t.Fatal("chromium missing (PCAPSYNC_E2E_REQUIRE=1 makes this a failure): scripts/deps.sh installs it")
		}
		t.Skip("chromium missing: scripts/deps.sh installs it")
	}
	cf := startConsoleFrom(t, nil)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox)...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	ctx, cancel := context.WithTimeout(bctx, 45*time.Second)
	defer cancel()
	watch := `window.__problems = [];
document.addEventListener("securitypolicyviolation", e => window.__problems.push("CSP violation: " + e.violatedDirective));
window.addEventListener("error", e => window.__problems.push("error: " + e.message));
window.addEventListener("unhandledrejection", e => window.__problems.push("rejection: " + e.reason));`
	if err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: watch})
		return err
	})); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	noProblems := func(where string) {
		t.Helper()
		if p, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`window.__problems`)); err != nil || len(p) > 0 {
			t.Errorf("%s: %q %v", where, p, err)
		}
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(cf.base+"/agents"), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), cf.token), chromedp.Submit(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.CSS(`#agents tbody tr.down`))); err != nil {
		t.Fatalf("login and the agents page: %v", err)
	}
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#agents tbody tr")].map(r => r.innerText)`))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 || !strings.Contains(rows[0], cf.addrs[0]) || !strings.HasPrefix(rows[0], "a") || !strings.Contains(rows[1], cf.addrs[1]) ||
		!strings.Contains(rows[2], cf.addrs[2]) || !strings.Contains(rows[2], "server down: unreachable") {
		t.Errorf("agents rows %q: want a on %s, b on %s, %s down", rows, cf.addrs[0], cf.addrs[1], cf.addrs[2])
	}
	noProblems("agents page")
	banner, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("servers")))
	if err != nil || !strings.Contains(banner, "2 of 3 servers answered") || !strings.Contains(banner, cf.addrs[2]+" unreachable") {
		t.Errorf("agents banner %q (%v): want 2 of 3 and %s unreachable", banner, err, cf.addrs[2])
	}
	flows, _, err := flowquery.Run(context.Background(), flowquery.Config{Dir: cf.roots[1]})
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(cf.base+"/flows?agent=b"), chromedp.WaitVisible(chromedp.CSS(`#flows tbody tr.flow`))); err != nil {
		t.Fatalf("flows page: %v", err)
	}
	ifaces, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#flows tbody tr.flow td:nth-child(3)")].map(e => e.textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	if len(ifaces) != len(flows) || len(flows) == 0 {
		t.Errorf("flows page: %d flows, want server %s's %d", len(ifaces), cf.addrs[1], len(flows))
	}
	noProblems("flows page")
	for _, s := range ifaces {
		if s != "b:eth1 on "+cf.addrs[1] {
			t.Errorf("flows page: a flow of %q, want b:eth1 on %s", s, cf.addrs[1])
			break
		}
	}
	// One flow's detail: a Community ID's link on the flows page opens
	// it over both servers (b's flow, a saw every conversation).
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#flows tbody a[href^="/flow?community_id="]`)),
		chromedp.WaitVisible(chromedp.CSS(`#pairs tbody tr[data-pair="a>b"]`))); err != nil {
		t.Fatalf("one flow's detail over the servers: %v", err)
	}
	seen, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#seen tbody tr td:first-child")].map(e => e.textContent)`))
	if err != nil || len(seen) != 2 || seen[0] != "a on "+cf.addrs[0] || seen[1] != "b on "+cf.addrs[1] {
		t.Errorf("flow detail: seen at %q (%v), want a on %s and b on %s", seen, err, cf.addrs[0], cf.addrs[1])
	}
	if b, _ := chromedp.Run(ctx, chromedp.Text(chromedp.ID("servers"))); !strings.Contains(b, cf.addrs[2]) {
		t.Errorf("flow detail: servers line %q, want %s down", b, cf.addrs[2])
	}
	noProblems("flow detail")
	for _, pg := range []string{"/timeline?since=2026-11-24T10:00:00Z&until=2026-11-24T10:01:00Z", "/packets?count=5"} {
		if err := chromedp.Do(ctx, chromedp.Navigate(cf.base+pg), chromedp.WaitVisible(chromedp.ID("servers"))); err != nil {
			t.Errorf("%s: %v", pg, err)
			continue
		}
		if b, _ := chromedp.Run(ctx, chromedp.Text(chromedp.ID("servers"))); !strings.Contains(b, cf.addrs[2]) {
			t.Errorf("%s: servers line %q, want %s down", pg, b, cf.addrs[2])
		}
		noProblems(pg)
	}
}
