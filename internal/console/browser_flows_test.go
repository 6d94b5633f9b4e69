package console

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/pcapsync/pcapsync/internal/flowquery"
)

// TestBrowserFlowsSort: on the flows page a click on the Bytes heading
// asks the server for the flows by bytes, largest first: the table's
// first row is the flow of the most bytes flowquery selects, and the
// pager says how many flows there are; a second click turns the order.
func TestBrowserFlowsSort(t *testing.T) {
	ctx := browser(t)
	fx := newFixture(t)
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	flows, _, err := flowquery.Run(context.Background(), flowquery.Config{Dir: fx.dir})
	if err != nil {
		t.Fatal(err)
	}
	most, least := uint64(0), ^uint64(0)
	for i := range flows {
		most, least = max(most, flows[i].Bytes[0]+flows[i].Bytes[1]), min(least, flows[i].Bytes[0]+flows[i].Bytes[1])
	}
	if err := chromedp.Do(tctx,
		chromedp.Navigate(fx.base+"/flows"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), testToken),
		chromedp.Submit(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.CSS(`#agents tbody tr`)),
		chromedp.Navigate(fx.base+"/flows"),
		chromedp.WaitVisible(chromedp.CSS(`#flows tbody tr`)),
	); err != nil {
		t.Fatalf("flows page: %v", err)
	}
	firstBytes := `(r => r && r.children[7].textContent)(document.querySelector("#flows tbody tr"))`
	for _, want := range []struct {
		bytes uint64
		pager string
	}{{most, "by bytes descending"}, {least, "by bytes ascending"}} {
		if err := chromedp.Do(tctx, chromedp.Click(chromedp.CSS(`#flows th[data-key="bytes"]`))); err != nil {
			t.Fatal(err)
		}
		js := `(t => t === "` + strconv.FormatUint(want.bytes, 10) + `" && t)(` + firstBytes + `)`
		if _, err := chromedp.Run(tctx, chromedp.Poll[string](js, chromedp.WithPollingTimeout(10*time.Second))); err != nil {
			got, _ := chromedp.Run(tctx, chromedp.Evaluate[string](firstBytes))
			t.Fatalf("%s: first row of %s bytes; want %d", want.pager, got, want.bytes)
		}
		pager, _ := chromedp.Run(tctx, chromedp.Text(chromedp.ID("pager")))
		if want := "Flows 1–" + strconv.Itoa(len(flows)) + " of " + strconv.Itoa(len(flows)) + ", " + want.pager; len(pager) < len(want) || pager[:len(want)] != want {
			t.Errorf("pager %q; want %q", pager, want)
		}
	}
	if p := problems(t, tctx); len(p) > 0 {
		t.Errorf("the flows page met %q", p)
	}
}
