//go:build linux

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/pki"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
)

// TestRemoteQuery: a collector with mutual TLS and a token serves
// pcapsync query on a listener that is not loopback (0.0.0.0, reached
// through 127.0.0.1). pcapsync query --from and curl with a client
// certificate get byte for byte what pcapsync query --dir writes on the
// collector's host for the same selection; every refusal (no client
// certificate, a certificate of another CA, no or a wrong token, a bad
// parameter, a query over --query-max) says why, exits non-zero and is
// counted in the metrics.
func TestRemoteQuery(t *testing.T) {
	requireTools(t, "curl")
	ctx := testContext(t)
	work := t.TempDir()
	certs, other := filepath.Join(work, "certs"), filepath.Join(work, "other")
	for _, d := range []string{certs, other} {
		gc := startProc(t, ctx, "gen certs", "", "gen", "certs", "--dir", d, "--collector", "127.0.0.1", "--agents", "rq1,viewer")
		if code := gc.wait(20 * time.Second); code != 0 {
			t.Fatalf("gen certs exited %d", code)
		}
	}
	pem := func(dir, name string) string { return filepath.Join(dir, name+".pem") }
	token, wrong := filepath.Join(work, "token"), filepath.Join(work, "wrong-token")
	for f, tok := range map[string]string{token: "e2e-query-token-0123456789", wrong: "e2e-query-token-9876543210"} {
		if err := os.WriteFile(f, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const count = 20000 // IMIX: about 7 MB of pcapng, more than a socket's buffers hold
	const start = int64(1780000000_000000000)
	in := filepath.Join(work, "in.pcap")
	writeGenFile(t, in, gen.FileConfig{Count: count, Mix: gen.MixIMIX, Stream: 91, Seed: 91, Nanosecond: true, Start: start})

	dir := filepath.Join(work, "out")
	addr := freeport.Addr(t)
	qport := freeport.Port(t)
	coll := startCollector(t, ctx, "", addr, dir, "--tls-cert", pem(certs, "collector"), "--tls-key", pem(certs, "collector-key"),
		"--tls-client-ca", pem(certs, "ca"), "--token-file", token, "--rotate-size", "1M", "--file-compress", "zstd",
		"--query-listen", fmt.Sprintf("0.0.0.0:%d", qport), "--query-max", "1", "--metrics", freeport.Addr(t))
	maddr := metricsAddr(t, coll)
	from := fmt.Sprintf("127.0.0.1:%d", qport)
	agent := startReplay(t, ctx, addr, "rq1", in, "--tls-ca", pem(certs, "ca"), "--tls-cert", pem(certs, "agent-rq1"),
		"--tls-key", pem(certs, "agent-rq1-key"), "--token-file", token)
	finishReplay(t, agent, count, 60*time.Second)
	waitNoPart(t, dir, 10*time.Second)

	viewer := []string{"--tls-ca", pem(certs, "ca"), "--tls-cert", pem(certs, "agent-viewer"), "--tls-key", pem(certs, "agent-viewer-key")}
	query := func(name string, args ...string) (int, *proc) {
		t.Helper()
		q := startProc(t, ctx, name, "", append([]string{"query"}, args...)...)
		return q.wait(60 * time.Second), q
	}
	read := func(p string) []byte {
		t.Helper()
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ok := 0
	globs := make([]string, 10_000)
	for i := range globs {
		globs[i] = fmt.Sprintf("x%04d*", i)
	}
	globs = append(globs, "rq?")
	for _, c := range []struct {
		name string
		sel  []string // query's selection flags
		curl string   // the same as parameters
		post bool     // curl sends them as a POST body
		code int      // the exit status of both queries
	}{
		{"range and filter", []string{"--since", epoch(start + 5e9), "--until", epoch(start + 15e9), "udp"},
			fmt.Sprintf("since=%s&until=%s&filter=udp", epoch(start+5e9), epoch(start+15e9)), false, 0},
		{"count across files", []string{"--agent", "rq*", "--count", "15000"}, "agent=rq%2A&count=15000", false, 0},
		// After the last packet: nothing to answer from (exit 3), the
		// answer still an empty pcapng, and a 200 for curl.
		{"empty", []string{"--since", epoch(start + 3600e9)}, "since=" + epoch(start+3600e9), false, 3},
		// Beyond a URL's 64 KiB: --from and curl send a POST body.
		{"10 000 agent globs", []string{"--agent", strings.Join(globs, ","), "--count", "500"},
			"agent=" + url.QueryEscape(strings.Join(globs, ",")) + "&count=500", true, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			local, remote, viaCurl := filepath.Join(work, "local.pcapng"), filepath.Join(work, "remote.pcapng"), filepath.Join(work, "curl.pcapng")
			if code, _ := query("query --dir", append([]string{"--dir", dir, "-w", local}, c.sel...)...); code != c.code {
				t.Fatalf("local query exited %d, want %d", code, c.code)
			}
			code, q := query("query --from", append(append([]string{"--from", from, "--token-file", token, "-w", remote, "--summary", "json"}, viewer...), c.sel...)...)
			if code != c.code {
				t.Fatalf("remote query exited %d, want %d", code, c.code)
			}
			ok++
			if !strings.Contains(q.stderr.String(), `"packets":`) {
				t.Errorf("remote query's summary missing: %s", q.stderr.String())
			}
			args := []string{"-sS", "--fail-with-body", "--cacert", pem(certs, "ca"), "--cert", pem(certs, "agent-viewer"),
				"--key", pem(certs, "agent-viewer-key"), "-H", "Authorization: Bearer e2e-query-token-0123456789", "-o", viaCurl}
			if c.post {
				body := filepath.Join(work, "params")
				if err := os.WriteFile(body, []byte(c.curl), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--data-binary", "@"+body, "https://"+from+"/query")
			} else {
				args = append(args, "https://"+from+"/query?"+c.curl)
			}
			curl := exec.CommandContext(ctx, "curl", args...)
			if out, err := curl.CombinedOutput(); err != nil {
				t.Fatalf("curl: %v\n%s", err, out)
			}
			ok++
			want := read(local)
			if len(want) < 100 {
				t.Fatalf("local output of %d bytes", len(want))
			}
			for _, p := range []string{remote, viaCurl} {
				if got := read(p); !bytes.Equal(got, want) {
					t.Errorf("%s: %d bytes, differs from the local query's %d", filepath.Base(p), len(got), len(want))
				}
			}
		})
	}

	// Refusals, each with its reason.
	_, localBad := query("query --dir bad", "--dir", dir, "-w", filepath.Join(work, "x"), "udp", "port", "99999")
	_, localMsg, _ := strings.Cut(strings.TrimSpace(localBad.stderr.String()), "usage: ")
	out := filepath.Join(work, "refused.pcapng")
	for _, b := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"no client certificate", []string{"--tls-ca", pem(certs, "ca"), "--token-file", token}, 1, "401 Unauthorized): client certificate required"},
		{"certificate of another CA", []string{"--tls-ca", pem(certs, "ca"), "--tls-cert", pem(other, "agent-viewer"), "--tls-key", pem(other, "agent-viewer-key"), "--token-file", token}, 1, "403 Forbidden): client certificate refused"},
		{"no token", viewer, 1, "401 Unauthorized): token required"},
		{"wrong token", append([]string{"--token-file", wrong}, viewer...), 1, "403 Forbidden): wrong token"},
		{"plain HTTP", []string{"--insecure", "--token-file", token}, 1, "requires HTTPS"},
		{"bad parameter", append(append([]string{"--token-file", token}, viewer...), "udp", "port", "99999"), 2, "400 Bad Request): " + localMsg},
	} {
		code, q := query("query --from "+b.name, append([]string{"--from", from, "-w", out}, b.args...)...)
		if code != b.code || !strings.Contains(q.stderr.String(), b.says) {
			t.Errorf("%s: exit %d, stderr %q; want exit %d and %q", b.name, code, q.stderr.String(), b.code, b.says)
		}
	}
	if localMsg == "" || !strings.Contains(localMsg, "filter") {
		t.Errorf("the local query's message for a bad filter: %q", localBad.stderr.String())
	}
	curlOut, err := exec.CommandContext(ctx, "curl", "-sS", "--cacert", pem(certs, "ca"), "https://"+from+"/query").CombinedOutput()
	if err != nil || !strings.Contains(string(curlOut), "client certificate required") {
		t.Errorf("curl without a certificate: %v, %q", err, curlOut)
	}
	// A pair that does not decode is refused, naming it, never dropped.
	curlOut, err = exec.CommandContext(ctx, "curl", "-sS", "--cacert", pem(certs, "ca"), "--cert", pem(certs, "agent-viewer"),
		"--key", pem(certs, "agent-viewer-key"), "-H", "Authorization: Bearer e2e-query-token-0123456789",
		"-w", " %{http_code}", "https://"+from+"/query?agent=%ZZ").CombinedOutput()
	if err != nil || !strings.Contains(string(curlOut), `parameter "agent=%ZZ": invalid URL escape "%ZZ"`) || !strings.HasSuffix(string(curlOut), " 400") {
		t.Errorf("curl with agent=%%ZZ: %v, %q", err, curlOut)
	}

	// --query-max 1: a query whose client takes nothing holds the slot
	// (its output is larger than the socket buffers); the next is 503.
	hold := holdQuery(t, ctx, from, pem(certs, "ca"), pem(certs, "agent-viewer"), pem(certs, "agent-viewer-key"))
	code, q := query("query --from busy", append([]string{"--from", from, "-w", out, "--token-file", token}, viewer...)...)
	if code != 1 || !strings.Contains(q.stderr.String(), "503 Service Unavailable): too many queries running (1)") {
		t.Errorf("a query over --query-max: exit %d, stderr %q", code, q.stderr.String())
	}
	hold.Body.Close() // the client goes away: its query is cancelled
	testutil.Eventually(t, 20*time.Second, func() error {
		m := scrapeMetrics(t, maddr)
		if v, err := m.Lookup("pcapsync_query_requests_total", "result=canceled"); err != nil || v != 1 {
			return fmt.Errorf("canceled %v, %v", v, err)
		}
		if v := sumSamples(m, "pcapsync_query_active"); v != 0 {
			return fmt.Errorf("%v queries active", v)
		}
		return nil
	})
	m := scrapeMetrics(t, maddr)
	for result, want := range map[string]float64{"ok": float64(ok), "unauthorized": 2 + 1, "forbidden": 3, "bad_request": 2, "busy": 1} {
		if v, err := m.Lookup("pcapsync_query_requests_total", "result="+result); err != nil || v != want {
			t.Errorf("pcapsync_query_requests_total{result=%q} = %v (%v), want %v", result, v, err, want)
		}
	}
	coll.stop(20 * time.Second)
	if s := coll.collectorSummary().Query; s == nil || s.Served != uint64(ok) || s.Canceled != 1 || s.Refused != 2+1+3+2+1 {
		t.Errorf("collector summary's query part %+v", s)
	}
}

// holdQuery starts a query of everything over TLS whose client reads
// nothing (a 4 KiB receive buffer): once its answer began, the server
// is blocked writing it.
func holdQuery(t *testing.T, ctx context.Context, addr, ca, cert, key string) *http.Response {
	t.Helper()
	tc, err := pki.ClientConfig(ca, cert, key, "")
	if err != nil {
		t.Fatal(err)
	}
	d := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return serr
	}}
	tr := &http.Transport{DialContext: d.DialContext, TLSClientConfig: tc, DisableCompression: true, ForceAttemptHTTP2: false,
		TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}
	t.Cleanup(tr.CloseIdleConnections)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/query", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer e2e-query-token-0123456789")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("holding query: %s", resp.Status)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}
