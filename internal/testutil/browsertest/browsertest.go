// Package browsertest starts headless Chromium (Debian's chromium) for
// the console's browser tests, with every page watched for CSP
// violations and uncaught errors.
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// RequireEnv, set to "1", makes a missing chromium a failure, not a
// skip (the project's test script sets it).
const RequireEnv = "PCAPSYNC_E2E_REQUIRE"

// watchScript records, in every page before its own scripts run, the
// CSP violations and the uncaught errors the page meets.
const watchScript = `window.__problems = [];
document.addEventListener("securitypolicyviolation", e => window.__problems.push("CSP violation: " + e.violatedDirective + " " + e.blockedURI));
window.addEventListener("error", e => window.__problems.push("error: " + e.message));
window.addEventListener("unhandledrejection", e => window.__problems.push("rejection: " + e.reason));`

// Start starts headless Chromium for t, under parent, with a 1280x900
// viewport, and returns its context, ended with t. Without chromium t
// is skipped, or fails when RequireEnv is "1".
func Start(t testing.TB, parent context.Context) context.Context {
	t.Helper()
	exe, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatal("chromium missing (" + RequireEnv + "=1 makes this a failure): scripts/deps.sh installs it")
		}
		t.Skip("chromium missing: scripts/deps.sh installs it (Debian's chromium); the console's browser tests are skipped")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox)
	actx, acancel := chromedp.NewExecAllocator(parent, opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); acancel() })
	if err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: watchScript})
		return err
	}), chromedp.EmulateViewport(1280, 900)); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

// Problems returns what the watch recorded in the page shown: CSP
// violations and uncaught errors.
func Problems(t testing.TB, ctx context.Context) []string {
	t.Helper()
	p, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`window.__problems`))
	if err != nil {
		t.Fatalf("reading the page's problems: %v", err)
	}
	return p
}
