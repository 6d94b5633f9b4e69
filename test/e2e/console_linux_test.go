//go:build linux

package e2e

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/pcapsync/pcapsync/internal/testutil/browsertest"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
)

// udpDrain listens on 127.0.0.1:port and discards what arrives, so that
// the generator's datagrams draw no ICMP port unreachable.
func udpDrain(t *testing.T, port int) {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 65536)
		for {
			if _, _, err := c.ReadFromUDP(buf); err != nil {
				return
			}
		}
	}()
}

// TestConsoleBrowser: the console of a real collector (--console-listen,
// --token-file) with three real agents capturing on loopback, in
// headless Chromium: a request without credentials is refused; the
// token logs in; the agents page lists the three with their interface
// and the drops the test caused (agent lossy's --max-rate under a
// flood: real drops, counted by the agent, written by the collector
// into its file's statistics); the timeline shows each agent's packets
// as written and lossy's drops; brushing the traffic's range and
// filtering gives the flows pcapsync flows gives of that range; one
// flow's detail shows it at a and b, all matched; its packets list is
// pcapsync query --community-id's lines and its download holds query
// -w's packets.
func TestConsoleBrowser(t *testing.T) {
	requireRoot(t)
	ctx := testContext(t)
	bctx := browsertest.Start(t, ctx)
	dir, tmp := t.TempDir(), t.TempDir()
	const token = "console-e2e-token-0123456789"
	tf := filepath.Join(tmp, "token")
	if err := os.WriteFile(tf, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pa, pb, pc := freeport.Port(t), freeport.Port(t), freeport.Port(t)
	for _, p := range []int{pa, pb, pc} {
		udpDrain(t, p)
	}
	addr, consoleAddr := freeport.Addr(t), freeport.Addr(t)
	base := "http://" + consoleAddr
	coll := startCollector(t, ctx, "", addr, dir, "--insecure", "--token-file", tf, "--console-listen", consoleAddr)
	start := time.Now()
	agentArgs := func(name, filter string, extra ...string) []string {
		return append([]string{"agent", "--insecure", "--token-file", tf, "--collector", addr, "--name", name, "--iface", "lo",
			"--stats-interval", "200ms", "--metrics", freeport.Addr(t), "--filter", filter}, extra...)
	}
	agents := map[string]*proc{
		"a":     startProc(t, ctx, "agent a", "", agentArgs("a", fmt.Sprintf("udp dst port %d", pa))...),
		"b":     startProc(t, ctx, "agent b", "", agentArgs("b", fmt.Sprintf("udp dst port %d or udp dst port %d", pa, pb))...),
		"lossy": startProc(t, ctx, "agent lossy", "", agentArgs("lossy", fmt.Sprintf("udp dst port %d", pc), "--max-rate", "200")...),
	}
	for _, p := range agents {
		p.waitReady(15 * time.Second)
	}
	coll.waitSessions(3, 15*time.Second)

	// The traffic: 200 datagrams to a's port (b sees them too), 100 to
	// b's alone, 1500 in a second to lossy's, which passes 200 a second.
	gens := []*proc{
		startProc(t, ctx, "gen a", "", "gen", "udp", "--to", fmt.Sprintf("127.0.0.1:%d", pa), "--count", "200", "--rate", "1000"),
		startProc(t, ctx, "gen b", "", "gen", "udp", "--to", fmt.Sprintf("127.0.0.1:%d", pb), "--count", "100", "--rate", "1000"),
		startProc(t, ctx, "gen lossy", "", "gen", "udp", "--to", fmt.Sprintf("127.0.0.1:%d", pc), "--count", "1500", "--rate", "1500"),
	}
	for _, g := range gens {
		if code := g.wait(20 * time.Second); code != 0 {
			t.Fatalf("%s exited with %d", g.name, code)
		}
	}
	// Each agent stops once it captured its traffic: its goodbye closes
	// its file, the statistics (with lossy's drops) at its end.
	want := map[string]uint64{"a": 200, "b": 300, "lossy": 1500}
	sums := map[string]uint64{}
	var lossyDrops uint64
	for name, p := range agents {
		p.waitMetric(15*time.Second, float64(want[name]), "pcapsync_agent_captured_packets_total", "interface=lo")
		p.stop(20 * time.Second)
		s := p.summary()
		sums[name] = s.Acked
		if name == "lossy" {
			lossyDrops = s.Dropped + s.RateDrops
		} else if s.Acked != want[name] {
			t.Errorf("agent %s: %d packets acknowledged, want %d", name, s.Acked, want[name])
		}
	}
	if lossyDrops == 0 || sums["lossy"]+lossyDrops != want["lossy"] {
		t.Fatalf("agent lossy: %d acknowledged, %d dropped; want drops, the sum %d", sums["lossy"], lossyDrops, want["lossy"])
	}
	waitNoPart(t, dir, 10*time.Second)
	end := time.Now()

	// Without credentials: refused.
	for _, p := range []string{"/api/agents", "/api/download", "/api/flow?community_id=x"} {
		resp, err := http.Get(base + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without credentials: %s, want 401", p, resp.Status)
		}
	}

	tctx, cancel := context.WithTimeout(bctx, 40*time.Second)
	defer cancel()
	check := func(what string) {
		t.Helper()
		if p := browsertest.Problems(t, tctx); len(p) > 0 {
			t.Errorf("%s: the page met %q", what, p)
		}
	}
	// The agents page: the three, their interface, lossy's drops.
	if err := chromedp.Do(tctx, chromedp.Navigate(base+"/agents"), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), token), chromedp.Submit(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.CSS(`#agents tbody tr[data-agent="lossy"]`))); err != nil {
		t.Fatalf("login and agents page: %v", err)
	}
	check("agents page")
	// Each row's cells by their column's heading.
	rows, _ := chromedp.Run(tctx, chromedp.Evaluate[[]map[string]string](`(h => [...document.querySelectorAll("#agents tbody tr")].map(r =>
		Object.fromEntries([...r.cells].map((c, i) => [h[i], c.textContent]))))([...document.querySelectorAll("#agents thead th")].map(th => th.textContent))`))
	if len(rows) != 3 {
		t.Fatalf("agents page rows %q; want a, b, lossy", rows)
	}
	for i, name := range []string{"a", "b", "lossy"} {
		r := rows[i]
		drops := "0 / 0 / 0"
		if name == "lossy" {
			drops = fmt.Sprintf("0 / %d / 0", lossyDrops)
		}
		if r["Agent"] != name || r["Interfaces (kernel drops)"] != "lo (0)" || r["Drops (kernel / agent / network: lost batches)"] != drops ||
			!strings.HasPrefix(r["Connected"], "no, since ") {
			t.Errorf("agents row %q: want %s, disconnected, interface lo, drops %s", r, name, drops)
		}
	}

	// The timeline of the test's span: each agent's packets as written,
	// lossy's drops.
	tl := url.Values{"since": {start.Add(-time.Second).UTC().Format(time.RFC3339Nano)}, "until": {end.Add(time.Second).UTC().Format(time.RFC3339Nano)}, "step": {"100ms"}}
	if err := chromedp.Do(tctx, chromedp.Navigate(base+"/timeline?"+tl.Encode()), chromedp.WaitVisible(chromedp.CSS("#chart canvas"))); err != nil {
		t.Fatalf("timeline: %v", err)
	}
	// Packets/s per 100 ms interval (times 0.1: packets), drops as counts.
	sumsJS := `(u => u && u.series.length === 10 && [1, 4, 7, 3, 6, 9].map(i => u.data[i].reduce((s, v) => s + (v || 0), 0) * (i % 3 === 0 ? 1 : 0.1)))(window.pcapsyncTimeline)`
	got, err := chromedp.Run(tctx, chromedp.Poll[[]float64](sumsJS, chromedp.WithPollingTimeout(10*time.Second)))
	if err != nil || len(got) != 6 {
		t.Fatalf("timeline series: %v (%v)", got, err)
	}
	check("timeline page")
	for i, name := range []string{"a", "b", "lossy"} {
		if math.Round(got[i]) != float64(sums[name]) {
			t.Errorf("timeline: %s's packets sum to %v; %d written", name, got[i], sums[name])
		}
	}
	if math.Round(got[3]) != 0 || math.Round(got[4]) != 0 || math.Round(got[5]) != float64(lossyDrops) {
		t.Errorf("timeline drops of a, b, lossy: %v; want 0, 0, %d", got[3:], lossyDrops)
	}
	marks, _ := chromedp.Run(tctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#markers li.marker")].map(l => l.dataset.agent + ":" + l.dataset.kind)`))
	for _, m := range []string{"a:stop", "b:stop", "lossy:stop", "a:disconnect", "lossy:disconnect"} {
		if !slices.Contains(marks, m) {
			t.Errorf("timeline markers %q: no %s", marks, m)
		}
	}

	// Brush the traffic's range; its flows link; filter for a's port.
	_, err = chromedp.Run(tctx, chromedp.Evaluate[bool](fmt.Sprintf(`(() => { const u = window.pcapsyncTimeline;
		const l = u.valToPos(%v, "x"), r = u.valToPos(%v, "x");
		u.setSelect({left: l, top: 0, width: r - l, height: 10}); return true; })()`,
		float64(start.UnixMilli())/1000, float64(end.UnixMilli())/1000)))
	if err != nil {
		t.Fatalf("brushing: %v", err)
	}
	href, err := chromedp.Run(tctx, chromedp.Poll[string](`(a => a && a.href)(document.getElementById("range-flows"))`, chromedp.WithPollingTimeout(5*time.Second)))
	if err != nil {
		t.Fatalf("no flows link after brushing: %v", err)
	}
	u, _ := url.Parse(href)
	since, until := u.Query().Get("since"), u.Query().Get("until")
	filter := fmt.Sprintf("udp dst port %d", pa)
	if err := chromedp.Do(tctx, chromedp.Navigate(href), chromedp.WaitVisible(chromedp.CSS(`#flows tbody tr`)),
		chromedp.SendKeys(chromedp.CSS(`input[name="filter"]`), filter)); err != nil {
		t.Fatalf("flows of the range: %v", err)
	}
	// The coverage line is replaced by the filtered answer's.
	if _, err := chromedp.Run(tctx, chromedp.Evaluate[bool](`(document.getElementById("coverage").textContent = "submitted", true)`)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(tctx, chromedp.Click(chromedp.CSS(`#selection button[type="submit"]`))); err != nil {
		t.Fatalf("flows of the range: %v", err)
	}
	flowsJS := `(t => t.includes("flows of") && [...document.querySelectorAll("#flows tbody tr")].map(r => [...r.cells].map(c => c.textContent)))(document.getElementById("coverage").textContent)`
	var pageFlows [][]string
	if _, err := chromedp.Run(tctx, chromedp.Poll[string](`(s => s.includes("filter=") && s)(location.search)`, chromedp.WithPollingTimeout(5*time.Second))); err != nil {
		t.Fatalf("the filter's submit: %v", err)
	}
	if pageFlows, err = chromedp.Run(tctx, chromedp.Poll[[][]string](flowsJS, chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Fatalf("filtered flows: %v", err)
	}
	check("flows page")
	cli := startProcEnv(t, ctx, "flows", "", []string{"TZ=UTC"}, "flows", "--dir", dir, "--since", since, "--until", until, "--json", filter)
	if code := cli.wait(20 * time.Second); code != 0 {
		t.Fatalf("pcapsync flows exited with %d", code)
	}
	var wantFlows, gotFlows []string
	var cid string
	sc := bufio.NewScanner(strings.NewReader(cli.stdout.String()))
	for sc.Scan() {
		var f struct {
			Iface       string `json:"iface"`
			CommunityID string `json:"community_id"`
			SrcPackets  uint64 `json:"src_packets"`
			DstPackets  uint64 `json:"dst_packets"`
		}
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			t.Fatalf("pcapsync flows --json: %v: %s", err, sc.Text())
		}
		n := f.SrcPackets + f.DstPackets
		wantFlows = append(wantFlows, fmt.Sprintf("%s %s %d", f.Iface, f.CommunityID, n))
		if strings.HasPrefix(f.Iface, "a:") {
			cid = f.CommunityID
		}
	}
	for _, r := range pageFlows {
		if len(r) == 10 {
			gotFlows = append(gotFlows, fmt.Sprintf("%s %s %s", r[2], r[9], r[6]))
		}
	}
	slices.Sort(wantFlows)
	slices.Sort(gotFlows)
	if !slices.Equal(gotFlows, wantFlows) || len(wantFlows) != 2 || cid == "" {
		t.Fatalf("flows page after brushing and filtering %q:\n%q\npcapsync flows gives:\n%q (want a's and b's flow)", filter, gotFlows, wantFlows)
	}

	// One flow's detail: a's flow, seen at a and b (in the order they saw
	// it first), all matched.
	if err := chromedp.Do(tctx, chromedp.Click(chromedp.CSS(`#flows tbody a[href="/flow?community_id=`+url.QueryEscape(cid)+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#pairs tbody tr[data-pair]`))); err != nil {
		t.Fatalf("one flow's detail: %v", err)
	}
	check("flow page")
	pair, _ := chromedp.Run(tctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#pairs tbody tr td")].map(td => td.textContent)`))
	if len(pair) != 9 || pair[0]+pair[1] != "ab" && pair[0]+pair[1] != "ba" || pair[2] != "200" || pair[3] != "200" || pair[4] != "200" || pair[5] != "0" || pair[6] != "0" {
		t.Errorf("flow %s, pair: %q; want a and b (the first to see it first), 200 at each, 200 matched, none lost", cid, pair)
	}
	// Its packets and its download against pcapsync query --community-id.
	link, _ := chromedp.Run(tctx, chromedp.Evaluate[string](`document.getElementById("flow-packets").href`))
	dl, _ := chromedp.Run(tctx, chromedp.Evaluate[string](`document.getElementById("flow-download").href`))
	if err := chromedp.Do(tctx, chromedp.Navigate(link)); err != nil {
		t.Fatal(err)
	}
	text, err := chromedp.Run(tctx, chromedp.Poll[string](`[...document.querySelectorAll("#packets .pkt")].map(e => e.textContent).join("\n")`, chromedp.WithPollingTimeout(10*time.Second)))
	if err != nil {
		t.Fatalf("the flow's packets: %v", err)
	}
	check("packets page")
	q := startProcEnv(t, ctx, "query", "", []string{"TZ=UTC"}, "query", "--dir", dir, "--community-id", cid, "--count", "100")
	if code := q.wait(20 * time.Second); code != 0 {
		t.Fatalf("pcapsync query exited with %d", code)
	}
	if got, want := strings.TrimSpace(text), strings.TrimSpace(q.stdout.String()); got != want || strings.Count(want, "\n") != 99 {
		t.Errorf("the flow's packets page:\n%s\npcapsync query --community-id %s --count 100:\n%s", got, cid, want)
	}
	b64, err := chromedp.Run(tctx, chromedp.Evaluate[string](`fetch(`+strconvQuote(dl)+`).then(r => r.arrayBuffer()).then(b => {
		let s = ""; for (const x of new Uint8Array(b)) s += String.fromCharCode(x); return btoa(s); })`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("download: %v", err)
	}
	pcapng, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatal(err)
	}
	gotPath, wantPath := filepath.Join(tmp, "console.pcapng"), filepath.Join(tmp, "query.pcapng")
	if err := os.WriteFile(gotPath, pcapng, 0o644); err != nil {
		t.Fatal(err)
	}
	qw := startProc(t, ctx, "query -w", "", "query", "--dir", dir, "--community-id", cid, "-w", wantPath)
	if code := qw.wait(20 * time.Second); code != 0 {
		t.Fatalf("pcapsync query -w exited with %d", code)
	}
	if gotP, wantP := readQPkts(t, gotPath), readQPkts(t, wantPath); !slices.Equal(gotP, wantP) || len(wantP) != 400 {
		t.Errorf("the flow's download: %d packets; pcapsync query -w writes %d (want 400: 200 at a and at b, equal)", len(gotP), len(wantP))
	}
}

// strconvQuote is s as a JavaScript string literal (JSON's quoting).
func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
