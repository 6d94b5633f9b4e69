//go:build linux

package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
)

// TestFrontDoorFlood: a collector limited to 512 descriptors
// (prlimit) with a TLS query listener (client certificates and a
// token), a tap and a metrics listener is flooded from eight loopback
// addresses: 576 clients keep TLS connections to the query listener
// without a certificate and re-send GET /query (401) on them, hold
// silent connections to the tap, and keep idle connections to the
// metrics listener after a scrape, reconnecting whenever they are
// closed. Meanwhile four agents connect and replay their files: every
// packet is written exactly once (the store still opens its files), the
// collector never runs out of descriptors, and the listeners' caps
// close the flood's connections at once (logged, at most once a second
// per listener).
func TestFrontDoorFlood(t *testing.T) {
	requireTools(t, append(checkTools, "prlimit")...)
	ctx := testContext(t)
	work := t.TempDir()
	certs := filepath.Join(work, "certs")
	agents := []string{"fd0", "fd1", "fd2", "fd3"}
	gc := startProc(t, ctx, "gen certs", "", "gen", "certs", "--dir", certs, "--collector", "127.0.0.1,localhost", "--agents", strings.Join(agents, ","))
	if code := gc.wait(20 * time.Second); code != 0 {
		t.Fatalf("gen certs exited %d", code)
	}
	token := filepath.Join(work, "token")
	if err := os.WriteFile(token, []byte("e2e-token-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const count = 2000
	in := filepath.Join(work, "in.pcap")
	writeGenFile(t, in, genConfig(count, 71))
	dir := filepath.Join(work, "out")
	port := func() string { return freeport.Addr(t) }
	addr, tapAddr, queryAddr, metricsAddr := port(), port(), port(), port()
	const nofile = 512
	coll := startProcAs(t, ctx, "collector", "", []string{"prlimit", fmt.Sprintf("--nofile=%d:%d", nofile, nofile), "--"}, nil,
		"collector", "--summary", "json", "--listen", addr, "--dir", dir,
		"--tls-cert", filepath.Join(certs, "collector.pem"), "--tls-key", filepath.Join(certs, "collector-key.pem"),
		"--tls-client-ca", filepath.Join(certs, "ca.pem"), "--token-file", token,
		"--tap", tapAddr, "--query-listen", queryAddr, "--metrics", metricsAddr)
	coll.waitReady(20 * time.Second)

	floodCtx, stopFlood := context.WithCancel(ctx)
	var fl flood
	attack := func(target string, talk func(net.Conn, *flood)) {
		for src := 2; src <= 9; src++ {
			for range 24 {
				fl.wg.Add(1)
				go fl.run(floodCtx, fmt.Sprintf("127.0.0.%d", src), target, talk)
			}
		}
	}
	attack(queryAddr, refusedQueries)
	attack(tapAddr, holdSilent)
	attack(metricsAddr, idleScrapes)
	defer func() { stopFlood(); fl.wg.Wait() }()
	// The flood is on once its clients made their first connections
	// and had queries refused.
	if err := pollUntil(ctx, 20*time.Second, func() error {
		if d, r := fl.dials.Load(), fl.refused.Load(); d < 3*8*24 || r < 100 {
			return fmt.Errorf("flood: %d connections, %d queries refused", d, r)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	var procs []*proc
	for _, name := range agents {
		procs = append(procs, startReplay(t, ctx, addr, name, in, "--tls-ca", filepath.Join(certs, "ca.pem"),
			"--tls-cert", filepath.Join(certs, "agent-"+name+".pem"), "--tls-key", filepath.Join(certs, "agent-"+name+"-key.pem"),
			"--token-file", token))
	}
	for _, p := range procs {
		finishReplay(t, p, count, 40*time.Second)
	}
	stopFlood()
	fl.wg.Wait()
	t.Logf("flood: %d connections, %d queries refused (401), %d scrapes", fl.dials.Load(), fl.refused.Load(), fl.scrapes.Load())
	coll.stop(20 * time.Second)
	log := coll.stderr.String()
	if strings.Contains(log, "too many open files") {
		t.Error("the collector ran out of descriptors")
	}
	for _, l := range []string{"query", "tap", "metrics"} {
		found := false
		for line := range strings.Lines(log) {
			found = found || strings.Contains(line, "connection limit reached") && strings.Contains(line, "listener="+l+" ")
		}
		if !found {
			t.Errorf("the collector's log does not show the %s listener's cap at work", l)
		}
	}
	if n := strings.Count(log, "query refused"); n > 120 {
		t.Errorf("%d lines of refused queries in the log: want at most one a second", n)
	}
	for _, name := range agents {
		checkAgentDir(t, filepath.Join(dir, name)).expectExactlyOnce(t, name, map[uint32]uint64{71: count})
	}
}

// pollUntil is testutil.Poll that also gives up when ctx ends.
func pollUntil(ctx context.Context, d time.Duration, cond func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond) // a polling period
	}
}

// flood counts what its clients did.
type flood struct {
	wg                      sync.WaitGroup
	dials, refused, scrapes atomic.Int64
}

// run connects to addr from src until ctx ends, and talks on each
// connection until it fails; then it pauses a quarter second (bounding
// the rate of a client the collector keeps closing) and reconnects.
func (f *flood) run(ctx context.Context, src, addr string, talk func(net.Conn, *flood)) {
	defer f.wg.Done()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
	for ctx.Err() == nil {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			f.dials.Add(1)
			stop := context.AfterFunc(ctx, func() { c.Close() })
			talk(c, f)
			stop()
			c.Close()
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond): // the client's reconnect pause
		}
	}
}

// refusedQueries shakes hands without a client certificate and sends
// GET /query (refused: 401) again and again while the connection lasts.
func refusedQueries(c net.Conn, f *flood) {
	tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true}) // an attacker checks nothing
	br := bufio.NewReader(tc)
	for {
		if _, err := io.WriteString(tc, "GET /query HTTP/1.1\r\nHost: collector\r\n\r\n"); err != nil {
			return
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusUnauthorized {
			f.refused.Add(1)
		}
		time.Sleep(100 * time.Millisecond) // the client's re-send pause
	}
}

// holdSilent sends nothing and waits for the server to close.
func holdSilent(c net.Conn, _ *flood) { io.Copy(io.Discard, c) }

// idleScrapes scrapes once, then keeps the connection idle.
func idleScrapes(c net.Conn, f *flood) {
	if _, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: collector\r\n\r\n"); err != nil {
		return
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	f.scrapes.Add(1)
	io.Copy(io.Discard, br)
}
