package console

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/pcapsync/pcapsync/internal/flowquery"
	"github.com/pcapsync/pcapsync/internal/pktline"
	"github.com/pcapsync/pcapsync/internal/query"
	"github.com/pcapsync/pcapsync/internal/testutil/browsertest"
)

// browser starts headless Chromium for t (browsertest.Start).
func browser(t testing.TB) context.Context { return browsertest.Start(t, context.Background()) }

// problems returns what the watch recorded in the page shown.
func problems(t testing.TB, ctx context.Context) []string { return browsertest.Problems(t, ctx) }

// pktText is the packets page's lines, "" (falsy: Poll waits) until
// they come.
const pktText = `[...document.querySelectorAll("#packets .pkt")].map(e => e.textContent).join("\n")`

// wantLines is what pcapsync query prints of cfg (a community_id's
// blocks found as the CLI finds them), in UTC.
func wantLines(t *testing.T, cfg query.Config) []string {
	t.Helper()
	var err error
	if cfg.CommunityID != "" {
		if cfg.Blocks, err = flowquery.Blocks(context.Background(), cfg); err != nil {
			t.Fatal(err)
		}
	}
	q, err := query.Prepare(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	if _, err := q.Each(context.Background(), func(p *query.Packet) error {
		lines = append(lines, string(pktline.AppendLine(nil, &pktline.Packet{Timestamp: p.Timestamp, Iface: p.Interface.Name,
			LinkType: p.Interface.LinkType, OrigLen: p.OrigLen, Data: p.Data}, time.UTC)))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return lines
}

// wantHex is hex.Dump of the last packet query cfg gives.
func wantHex(t *testing.T, cfg query.Config) string {
	t.Helper()
	q, err := query.Prepare(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var last []byte
	if _, err := q.Each(context.Background(), func(p *query.Packet) error { last = bytes.Clone(p.Data); return nil }); err != nil {
		t.Fatal(err)
	}
	return hex.Dump(last)
}

// TestBrowser: in headless Chromium, the console logs in with the
// token; the agents page lists the agents of the status and of the
// root, with a kept window; the flows page shows the root's flows as
// flowquery selects them, with top talkers; the packets page lists the
// first packets as query and pktline give them, and its download link
// gives what query.Run writes of the same selection, byte for byte;
// no page has an inline script or style, the session cookie is out of
// the scripts' reach, and no page meets a CSP violation or an error.
func TestBrowser(t *testing.T) {
	ctx := browser(t)
	fx := newFixture(t)
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	shots := os.Getenv("PCAPSYNC_CONSOLE_SCREENSHOTS") // a directory: each page's screenshot, for docs/console/
	check := func(what string) {
		t.Helper()
		if shots != "" {
			b, err := chromedp.Run(tctx, chromedp.FullScreenshot(100)) // 100: PNG
			if err == nil {
				err = os.WriteFile(filepath.Join(shots, strings.Fields(what)[0]+".png"), b, 0o644)
			}
			if err != nil {
				t.Errorf("screenshot of the %s: %v", what, err)
			}
		}
		if p := problems(t, tctx); len(p) > 0 {
			t.Errorf("%s: the page met %q", what, p)
		}
		n, err := chromedp.Run(tctx, chromedp.Evaluate[int](`document.querySelectorAll("script:not([src]), style").length`))
		if err != nil || n != 0 {
			t.Errorf("%s: %d inline scripts or styles (%v)", what, n, err)
		}
	}

	err := chromedp.Do(tctx,
		chromedp.Navigate(fx.base+"/agents"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), testToken),
		chromedp.Submit(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.CSS(`#agents tbody tr[data-agent="c"]`)),
	)
	if err != nil {
		t.Fatalf("login and agents page: %v", err)
	}
	check("agents page")
	loc, _ := chromedp.Run(tctx, chromedp.Location())
	if !strings.HasSuffix(loc, "/agents") {
		t.Errorf("after the login at %s, want /agents", loc)
	}
	if c, _ := chromedp.Run(tctx, chromedp.Evaluate[string](`document.cookie`)); c != "" {
		t.Errorf("document.cookie %q: the session must be HttpOnly", c)
	}
	rows, err := chromedp.Run(tctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#agents tbody tr")].map(r => r.innerText)`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a": "eth0 (3), eth9 (no counters yet)", "b": "not known to this server", "c": "nothing kept"}
	if len(rows) != len(want) || !strings.Contains(rows[0], "host-a") {
		t.Errorf("agents page rows %q; want a, b, c", rows)
	}
	if !strings.Contains(rows[0], "2026-11-24") {
		t.Errorf("agents row %q: want a's kept window", rows[0])
	}
	// The version a told its collector; c told none.
	for _, r := range rows {
		if f := strings.Split(r, "\t"); len(f) > 3 && map[string]string{"a": "1.4.0 (test)", "c": "unknown"}[f[0]] != strings.TrimPrefix(f[3], "–") {
			t.Errorf("agents row %q: version column %q", r, f[3])
		}
	}
	for _, r := range rows {
		name := strings.Fields(r)[0]
		if w, ok := want[name]; !ok || !strings.Contains(r, w) {
			t.Errorf("agents row %q: want %q in it", r, w)
		}
	}
	if cov, _ := chromedp.Run(tctx, chromedp.Text(chromedp.ID("coverage"))); !strings.Contains(cov, "3 agents") {
		t.Errorf("agents coverage %q", cov)
	}

	flows, _, err := flowquery.Run(context.Background(), flowquery.Config{Dir: fx.dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(tctx, chromedp.Navigate(fx.base+"/flows"), chromedp.WaitVisible(chromedp.CSS(`#talkers tbody tr`))); err != nil {
		t.Fatalf("flows page: %v", err)
	}
	check("flows page")
	n, _ := chromedp.Run(tctx, chromedp.Evaluate[int](`document.querySelectorAll("#flows tbody tr").length`))
	cov, _ := chromedp.Run(tctx, chromedp.Text(chromedp.ID("coverage")))
	for _, id := range []string{"talkers", "conversations", "services"} {
		group := map[string]string{"talkers": flowquery.GroupHost, "conversations": flowquery.GroupPair, "services": flowquery.GroupPort}[id]
		top, _ := flowquery.Top(flows, group, flowquery.ByBytes, TopTalkers)
		got, _ := chromedp.Run(tctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#`+id+` tbody tr td:first-child")].map(td => td.textContent)`))
		var want []string
		for _, x := range top {
			want = append(want, x.Key)
		}
		if strings.Join(got, ",") != strings.Join(want, ",") || len(want) == 0 {
			t.Errorf("top %s %q; flowquery.Top gives %q", id, got, want)
		}
		keys, err := chromedp.Run(tctx, chromedp.Evaluate[string](`document.querySelector("#`+id+`-chart canvas").dataset.keys`))
		var chartKeys []string
		if err == nil {
			err = json.Unmarshal([]byte(keys), &chartKeys)
		}
		if err != nil || strings.Join(chartKeys, ",") != strings.Join(want, ",") {
			t.Errorf("top %s chart's bars %q (%v); flowquery.Top gives %q", id, chartKeys, err, want)
		}
	}
	if c, _ := chromedp.Run(tctx, chromedp.Evaluate[int](`document.querySelectorAll("#chart canvas").length`)); c != 1 {
		t.Errorf("flows page: %d chart canvases; want 1 (uPlot, vendored)", c)
	}
	if n != len(flows) || n == 0 || !strings.Contains(cov, "flows of 2 agents") {
		t.Errorf("flows page: %d rows, coverage %q; flowquery selects %d flows", n, cov, len(flows))
	}

	// One flow's detail: its Community ID's link on the flows page, a
	// flow that both a and b saw (b keeps the even conversations).
	groups := flowquery.Group(flows)
	var cid string
	for _, g := range groups {
		if len(g) == 2 && g[0].Agent == "a" && g[1].Agent == "b" {
			cid = g[0].CommunityID
			break
		}
	}
	if cid == "" {
		t.Fatal("no flow seen by both a and b")
	}
	if err := chromedp.Do(tctx, chromedp.Click(chromedp.CSS(`#flows tbody a[href="/flow?community_id=`+url.QueryEscape(cid)+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#pairs tbody tr[data-pair="a>b"]`))); err != nil {
		t.Fatalf("one flow's detail: %v", err)
	}
	check("flowdetail page")
	seen, _ := chromedp.Run(tctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#seen tbody tr")].map(r => r.dataset.agent)`))
	pair, _ := chromedp.Run(tctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#pairs tbody tr td")].map(td => td.textContent)`))
	n0 := strconv.FormatUint(groups[0][0].Packets[0]+groups[0][0].Packets[1], 10)
	for _, g := range groups {
		if g[0].CommunityID == cid {
			n0 = strconv.FormatUint(g[0].Packets[0]+g[0].Packets[1], 10)
		}
	}
	if strings.Join(seen, ",") != "a,b" || len(pair) < 7 || pair[2] != n0 || pair[3] != n0 || pair[4] != n0 || pair[5] != "0" || pair[6] != "0" {
		t.Errorf("flow %s: seen at %q, pair a>b %q; want a and b, %s packets at each, all matched", cid, seen, pair, n0)
	}
	// Its packets: the detail's link.
	link, _ := chromedp.Run(tctx, chromedp.Evaluate[string](`document.getElementById("flow-packets").href`))
	if err := chromedp.Do(tctx, chromedp.Navigate(link)); err != nil {
		t.Fatal(err)
	}
	text, err := chromedp.Run(tctx, chromedp.Poll[string](pktText, chromedp.WithPollingTimeout(10*time.Second)))
	if err != nil {
		t.Fatalf("one flow's packets: %v", err)
	}
	check("flow packets")
	flowLines := wantLines(t, query.Config{Dir: fx.dir, CommunityID: cid, Count: 100})
	if got := strings.TrimSpace(text); got != strings.Join(flowLines, "\n") || len(flowLines) == 0 {
		t.Errorf("flow %s's packets:\n%s\nwant:\n%s", cid, got, strings.Join(flowLines, "\n"))
	}

	lines := wantLines(t, query.Config{Dir: fx.dir, Agents: []string{"a"}, Count: 20})
	if err := chromedp.Do(tctx, chromedp.Navigate(fx.base+"/packets?agent=a&count=20")); err != nil {
		t.Fatal(err)
	}
	text, err = chromedp.Run(tctx, chromedp.Poll[string](pktText, chromedp.WithPollingTimeout(10*time.Second)))
	if err != nil {
		t.Fatalf("packets page: %v", err)
	}
	check("packets page")
	if got := strings.TrimSpace(text); got != strings.Join(lines, "\n") || len(lines) != 20 {
		t.Errorf("packets page lines:\n%s\nwant:\n%s", got, strings.Join(lines, "\n"))
	}
	// One packet's bytes: a click on its line.
	if err := chromedp.Do(tctx, chromedp.Click(chromedp.CSS("#packets .pkt:nth-child(3)"))); err != nil {
		t.Fatal(err)
	}
	dump, err := chromedp.Run(tctx, chromedp.Poll[string](`document.getElementById("hex").textContent`, chromedp.WithPollingTimeout(10*time.Second)))
	if err != nil {
		t.Fatalf("packet bytes: %v", err)
	}
	if want := wantHex(t, query.Config{Dir: fx.dir, Agents: []string{"a"}, Count: 3}); dump != want {
		t.Errorf("the third packet's bytes:\n%s\nwant:\n%s", dump, want)
	}
	check("packet bytes")

	// The download, fetched in the page with its session, against
	// query.Run of the same selection.
	href, _ := chromedp.Run(tctx, chromedp.Evaluate[string](`document.getElementById("download").href`))
	b64, err := chromedp.Run(tctx, chromedp.Evaluate[string](`fetch(document.getElementById("download").href).then(r => r.arrayBuffer()).then(b => {
		let s = ""; for (const x of new Uint8Array(b)) s += String.fromCharCode(x); return btoa(s); })`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("download: %v", err)
	}
	got, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatal(err)
	}
	var pcap bytes.Buffer
	if _, err := query.Run(context.Background(), query.Config{Dir: fx.dir, Agents: []string{"a"}}, &pcap); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(href, "agent=a") || strings.Contains(href, "count") || !bytes.Equal(got, pcap.Bytes()) {
		t.Errorf("download %s: %d bytes; query.Run of the selection writes %d", href, len(got), pcap.Len())
	}
}
