package console

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/testutil/roottest"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// tlBase is the first packet's time of the timeline's root.
var tlBase = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// tlFile is one file an agent of the timeline's root writes: n packets
// from at every 10 ms, then (kdrops > 0) its statistics at statsAt.
type tlFile struct {
	at, statsAt    time.Duration
	n              int
	kdrops, adrops uint64
}

// writeTimelineRoot writes, through a real store, agent "a": 100
// packets at 0–0.99 s (kernel drops 5, agent drops 2 at 1 s), nothing
// from 1 to 10 s, 50 packets at 10–10.49 s (kernel drops 8 at 10.5 s:
// 3 more); and agent "b": 30 packets at 3–3.29 s. It returns the
// captured bytes per agent and each packet's pcapng bytes (EPB).
func writeTimelineRoot(t *testing.T, dir string) (epb map[string]int64) {
	return writeTimelineRootWith(t, store.Config{Dir: dir})
}

// writeTimelineRootWith is writeTimelineRoot with the store's cfg.
func writeTimelineRootWith(t *testing.T, cfg store.Config) (epb map[string]int64) {
	t.Helper()
	cfg.Fsync = store.FsyncNever
	cfg.RotateInterval = -1 // the files the test counts, even across the top of an hour
	st, err := store.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	epb = map[string]int64{}
	for ai, ag := range []struct {
		name  string
		files []tlFile
	}{
		{"a", []tlFile{{at: 0, n: 100, statsAt: time.Second, kdrops: 5, adrops: 2}, {at: 10 * time.Second, n: 50, statsAt: 10500 * time.Millisecond, kdrops: 8, adrops: 2}}},
		{"b", []tlFile{{at: 3 * time.Second, n: 30}}},
	} {
		w, err := st.Writer(ag.name)
		if err != nil {
			t.Fatal(err)
		}
		inst := st.Instance([16]byte{byte(ai + 1)}, ag.name)
		for fi, f := range ag.files {
			w.Start("host-" + ag.name)
			i0, err := w.AddInterface(wire.Interface{Name: "eth0", LinkType: 1, SnapLen: 65535})
			if err != nil {
				t.Fatal(err)
			}
			roottest.WriteBatches(t, w, inst, []int{i0}, f.n, 25, func(i int) (int64, uint32, []byte) {
				data := gen.Frame(make([]byte, 64+i*7%500), gen.LinkTypeEthernet, uint32(ai), uint64(fi*1000+i))
				epb[ag.name] += 32 + int64(len(data)+3)&^3
				return tlBase.Add(f.at + time.Duration(i)*10*time.Millisecond).UnixNano(), 0, data
			})
			if f.kdrops > 0 {
				if _, err := w.RecordStats(&wire.Stats{Time: tlBase.Add(f.statsAt).UnixNano(), AgentDrops: f.adrops,
					Interfaces: []wire.IfaceStats{{Index: 0, Received: uint64(f.n) + f.kdrops, KernelDrops: f.kdrops, Captured: uint64(f.n)}}}, []int{i0}); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := st.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return epb
}

func sumPtr(v []*int64) (n int64) {
	for _, p := range v {
		if p != nil {
			n += *p
		}
	}
	return n
}

func sum(v []int64) (n int64) {
	for _, x := range v {
		n += x
	}
	return n
}

// getTimeline asks fx's console for a timeline with params.
func (fx *fixture) getTimeline(t *testing.T, ck []*http.Cookie, params url.Values) (int, Timeline, string) {
	t.Helper()
	resp, body := fx.get(t, "/api/timeline?"+params.Encode(), ck...)
	var tl Timeline
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, &tl); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
	}
	return resp.StatusCode, tl, string(body)
}

func TestTimeline(t *testing.T) {
	dir := t.TempDir()
	epb := writeTimelineRoot(t, dir)
	h, err := New(Config{Dir: dir, Token: testToken, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ts := newServer(t, h)
	ck := ts.login(t, testToken).Cookies()
	rng := func(from, to time.Duration, step string) url.Values {
		v := url.Values{"since": {tlBase.Add(from).Format(time.RFC3339Nano)}, "until": {tlBase.Add(to).Format(time.RFC3339Nano)}}
		if step != "" {
			v.Set("step", step)
		}
		return v
	}
	code, tl, body := ts.getTimeline(t, ck, rng(0, 20*time.Second, "1s"))
	if code != http.StatusOK || tl.Points != 20 || len(tl.Agents) != 2 {
		t.Fatalf("%d %s", code, body)
	}
	a, b := tl.Agents[0], tl.Agents[1]
	if a.Agent != "a" || b.Agent != "b" {
		t.Fatalf("agents %s, %s", a.Agent, b.Agent)
	}
	for _, c := range []struct {
		name      string
		got, want int64
	}{
		{"a's packets", sumPtr(a.Packets), 150}, {"b's packets", sumPtr(b.Packets), 30},
		{"a's packets in 0–1 s", *a.Packets[0], 100}, {"a's packets in 10–11 s", *a.Packets[10], 50},
		{"a's drops at 1 s", a.Drops[1], 7}, {"a's drops at 10 s", a.Drops[10], 3}, {"a's drops", sum(a.Drops), 10},
		{"b's drops", sum(b.Drops), 0},
	} {
		if c.got != c.want {
			t.Errorf("%s: %d, want %d", c.name, c.got, c.want)
		}
	}
	// Bytes: the packets' pcapng blocks, plus what the writer puts
	// between them (marks, interfaces): at least the packets', within
	// a tenth of them.
	for _, s := range tl.Agents {
		if got, want := sumPtr(s.Bytes), epb[s.Agent]; got < want || got > want+want/10 {
			t.Errorf("%s's bytes: %d, want %d..%d", s.Agent, got, want, want+want/10)
		}
	}
	// The gap: nothing kept of a from 1 to 10 s, of b but at 3 s.
	for i := 1; i < 10; i++ {
		if a.Packets[i] != nil || a.Bytes[i] != nil {
			t.Errorf("a's interval %d: %v packets, want a gap (null)", i, *a.Packets[i])
		}
	}
	for i := range b.Packets {
		if (b.Packets[i] != nil) != (i == 3) {
			t.Errorf("b's interval %d: %v, want a gap but at 3", i, b.Packets[i])
		}
	}
	if c := tl.Coverage; c.Agents != 2 || c.Files != 3 || c.Unindexed != 0 || c.NoDrops != 0 {
		t.Errorf("coverage %+v", c)
	}

	// A range within a file: its blocks' share in time; an agent glob.
	v := rng(10*time.Second, 10250*time.Millisecond, "50ms")
	v.Set("agent", "a*")
	if code, tl, body = ts.getTimeline(t, ck, v); code != http.StatusOK || len(tl.Agents) != 1 || tl.Points != 5 {
		t.Fatalf("%d %s", code, body)
	}
	if got := sumPtr(tl.Agents[0].Packets); got < 24 || got > 26 {
		t.Errorf("a's packets in 10–10.25 s: %d, want 25 (±1: a block's share by time)", got)
	}

	// A range starting within a's first file: its part of the file.
	if code, tl, body = ts.getTimeline(t, ck, rng(500*time.Millisecond, 2500*time.Millisecond, "1s")); code != http.StatusOK || tl.Points != 2 {
		t.Fatalf("%d %s", code, body)
	}
	if p := tl.Agents[0].Packets; p[0] == nil || *p[0] < 49 || *p[0] > 51 || p[1] != nil {
		t.Errorf("a from 0.5 s: %v, want about 50 in the first interval, a gap in the second", p)
	}

	// The default step: at most MaxPoints over a day.
	if code, tl, body = ts.getTimeline(t, ck, rng(0, 24*time.Hour, "")); code != http.StatusOK || tl.Points > MaxPoints || tl.Step != "1m0s" || sumPtr(tl.Agents[0].Packets) != 150 {
		t.Fatalf("a day: %d %s", code, body[:min(len(body), 300)])
	}

	// A file without its index: not scanned, named in the coverage.
	files, _ := filepath.Glob(filepath.Join(dir, "b", "*.idx"))
	if len(files) != 1 {
		t.Fatalf("b's indexes: %v", files)
	}
	os.Remove(files[0])
	if code, tl, body = ts.getTimeline(t, ck, rng(0, 20*time.Second, "1s")); code != http.StatusOK {
		t.Fatalf("%d %s", code, body)
	}
	if c := tl.Coverage; c.Unindexed != 1 || len(c.Named) != 1 || !strings.HasPrefix(c.Named[0], filepath.Base(strings.TrimSuffix(files[0], index.Suffix))) ||
		strings.Contains(c.Named[0], dir) || sumPtr(tl.Agents[1].Packets) != 0 {
		t.Errorf("b unindexed: coverage %+v, b %v", c, tl.Agents[1].Packets)
	}
}

func TestTimelineRefused(t *testing.T) {
	dir := t.TempDir()
	h, err := New(Config{Dir: dir, Token: testToken, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ts := newServer(t, h)
	ck := ts.login(t, testToken).Cookies()
	for _, q := range []string{
		"step=0", "step=-1s", "step=1ns", "step=abc", "step=1s&step=2s", "step=" + strings.Repeat("9", 40) + "h",
		"since=-1d&step=1ms", "since=2026-01-02&until=2026-01-01", "since=2026-01-01&until=2026-01-01",
		"agent=../etc", "agent=.x*", "agent=a/b", "filter=tcp", "iface=eth0", "count=1", "until=yesterday-ish",
		"since=" + strings.Repeat("1", 5000), "agent=" + strings.Repeat("a,", 17000), "step=1s;x=1", "%zz=1",
	} {
		resp, body := ts.get(t, "/api/timeline?"+q, ck...)
		var e struct{ Error string }
		if resp.StatusCode != http.StatusBadRequest || json.Unmarshal(body, &e) != nil || e.Error == "" {
			t.Errorf("%.80s: %d %.200s, want 400 with an error", q, resp.StatusCode, body)
		}
	}
	if resp, _ := ts.get(t, "/api/timeline"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no session: %d, want 401", resp.StatusCode)
	}
}

// newServer serves h on loopback (plain HTTP) as a fixture.
func newServer(t *testing.T, h http.Handler) *fixture {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &fixture{base: srv.URL}
}

// TestTimelineCompressed: the drops of files of gzip members and of
// zstd frames per block are decoded from their last block; those of a
// zstd file of one frame are not known, and said so.
func TestTimelineCompressed(t *testing.T) {
	for _, c := range []struct {
		spec    string
		frames  store.ZstdFrames
		noDrops int
	}{{"gzip", 0, 0}, {"zstd", store.ZstdFramePerBlock, 0}, {"zstd", store.ZstdFramePerFile, 3}} {
		dir := t.TempDir()
		sp, err := compress.ParseSpec(c.spec)
		if err != nil {
			t.Fatal(err)
		}
		writeTimelineRootWith(t, store.Config{Dir: dir, FileCompress: sp, ZstdFrames: c.frames})
		tl, err := BuildTimeline(context.Background(), dir, nil, tlBase, tlBase.Add(20*time.Second), time.Second)
		if err != nil || len(tl.Agents) != 2 {
			t.Fatalf("%s %v: %v", c.spec, c.frames, err)
		}
		drops := int64(10)
		if c.noDrops > 0 {
			drops = 0
		}
		if a := tl.Agents[0]; sumPtr(a.Packets) != 150 || sum(a.Drops) != drops || tl.Coverage.NoDrops != c.noDrops || tl.Coverage.Files != 3 {
			t.Errorf("%s %v: a's packets %d, drops %d (want 150, %d), coverage %+v", c.spec, c.frames, sumPtr(a.Packets), sum(a.Drops), drops, tl.Coverage)
		}
	}
}

// TestBrowserTimeline: in headless Chromium, after the login, the
// timeline page draws writeTimelineRoot's agents (a uPlot canvas, a's
// drops as markers, the coverage line) with no CSP violation or error;
// a range brushed through uPlot's API zooms the chart and links to the
// flows and packets of that range.
func TestBrowserTimeline(t *testing.T) {
	ctx := browser(t)
	dir := t.TempDir()
	writeTimelineRoot(t, dir)
	h, err := New(Config{Dir: dir, Token: testToken, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ts := newServer(t, h)
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v := url.Values{"since": {tlBase.Format(time.RFC3339)}, "until": {tlBase.Add(20 * time.Second).Format(time.RFC3339)}, "step": {"1s"}}
	if err := chromedp.Do(tctx,
		chromedp.Navigate(ts.base+"/timeline"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), testToken),
		chromedp.Submit(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.ID("agents")),
		chromedp.Navigate(ts.base+"/timeline?"+v.Encode()),
		chromedp.WaitVisible(chromedp.CSS("#chart canvas")),
	); err != nil {
		t.Fatalf("login and timeline page: %v", err)
	}
	cov, err := chromedp.Run(tctx, chromedp.Poll[string](`(t => t.includes("agents") && t)(document.getElementById("coverage").textContent)`, chromedp.WithPollingTimeout(10*time.Second)))
	if err != nil || !strings.Contains(cov, "2 agents") || !strings.Contains(cov, "3 data files") || !strings.Contains(cov, "Nothing missing") {
		t.Errorf("timeline coverage %q (%v)", cov, err)
	}
	if p := problems(t, tctx); len(p) > 0 {
		t.Errorf("timeline page: the page met %q", p)
	}
	if shots := os.Getenv("PCAPSYNC_CONSOLE_SCREENSHOTS"); shots != "" { // as TestBrowser's
		b, err := chromedp.Run(tctx, chromedp.FullScreenshot(100))
		if err == nil {
			err = os.WriteFile(filepath.Join(shots, "timeline.png"), b, 0o644)
		}
		if err != nil {
			t.Errorf("screenshot of the timeline page: %v", err)
		}
	}
	// The markers: where each agent's capture stopped (its last file's
	// last packet, nothing kept after it), drawn and listed.
	marks, err := chromedp.Run(tctx, chromedp.Poll[[]string](`(l => l.length > 0 && l)([...document.querySelectorAll("#markers li.marker")].map(l => l.dataset.agent + ":" + l.dataset.kind))`,
		chromedp.WithPollingTimeout(5*time.Second)))
	if err != nil || !slices.Contains(marks, "a:stop") || !slices.Contains(marks, "b:stop") {
		t.Errorf("timeline markers %q (%v); want a stop of a and of b", marks, err)
	}
	// a's series: packets/s, bytes/s, drops (markers where they grew).
	drops, err := chromedp.Run(tctx, chromedp.Evaluate[[]float64](`[window.pcapsyncTimeline.series.length, window.pcapsyncTimeline.data[1][0], window.pcapsyncTimeline.data[3][1], window.pcapsyncTimeline.data[3][10]]`))
	if err != nil || len(drops) != 4 || drops[0] != 7 || drops[1] != 100 || drops[2] != 7 || drops[3] != 3 {
		t.Errorf("chart series count, a's packets/s at 0 s, drops at 1 s and 10 s: %v (%v); want 7, 100, 7, 3", drops, err)
	}
	// Brush 2 s to 5 s.
	t0 := float64(tlBase.Unix())
	_, err = chromedp.Run(tctx, chromedp.Evaluate[bool](fmt.Sprintf(`(() => { const u = window.pcapsyncTimeline;
		const l = u.valToPos(%[1]v + 2, "x"), r = u.valToPos(%[1]v + 5, "x");
		u.setSelect({left: l, top: 0, width: r - l, height: 10}); return true; })()`, t0)))
	if err != nil {
		t.Fatalf("brushing: %v", err)
	}
	got, err := chromedp.Run(tctx, chromedp.Poll[[]float64](fmt.Sprintf(`(u => u.scales.x.min > %[1]v + 1 && [u.scales.x.min - %[1]v, u.scales.x.max - %[1]v])(window.pcapsyncTimeline)`, t0),
		chromedp.WithPollingTimeout(5*time.Second)))
	if err != nil || len(got) != 2 || got[0] < 1.9 || got[0] > 2.1 || got[1] < 4.9 || got[1] > 5.1 {
		t.Errorf("the chart's x scale after brushing 2–5 s: %v (%v)", got, err)
	}
	href, err := chromedp.Run(tctx, chromedp.Evaluate[string](`document.getElementById("range-flows").href`))
	if err != nil {
		t.Fatalf("no flows link after brushing: %v", err)
	}
	u, err := url.Parse(href)
	if err != nil || u.Path != "/flows" {
		t.Fatalf("flows link %q", href)
	}
	since, err1 := time.Parse(time.RFC3339Nano, u.Query().Get("since"))
	until, err2 := time.Parse(time.RFC3339Nano, u.Query().Get("until"))
	if err1 != nil || err2 != nil || since.Sub(tlBase.Add(2*time.Second)).Abs() > 100*time.Millisecond || until.Sub(tlBase.Add(5*time.Second)).Abs() > 100*time.Millisecond {
		t.Errorf("flows link %q: want since 2 s and until 5 s after %s", href, tlBase)
	}
	if p, _ := chromedp.Run(tctx, chromedp.Evaluate[string](`document.getElementById("range-packets").href`)); !strings.Contains(p, "/packets?") || !strings.Contains(p, url.QueryEscape(u.Query().Get("since"))) {
		t.Errorf("packets link %q", p)
	}
	// The link leads to the flows page with the range in its form.
	if err := chromedp.Do(tctx, chromedp.Navigate(href), chromedp.WaitVisible(chromedp.CSS(`input[name="since"]`))); err != nil {
		t.Fatal(err)
	}
	if s, _ := chromedp.Run(tctx, chromedp.Evaluate[string](`document.querySelector('input[name="since"]').value`)); s != u.Query().Get("since") {
		t.Errorf("flows page's since %q, want %q", s, u.Query().Get("since"))
	}
}
