package federate

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/query"
	"github.com/pcapsync/pcapsync/internal/queryhttp"
)

// streamServer answers with n packets of size bytes on agent's eth0,
// generated as they are sent, timestamps interleaving with the other
// servers' (server idx of k).
func streamServer(t *testing.T, agent string, idx, k, n, size int) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", queryhttp.ContentType)
		w.Header().Set("Trailer", queryhttp.TrailerResult)
		bw := bufio.NewWriterSize(w, 64<<10)
		nw, _ := pcapfile.NewNgWriter(bw, pcapfile.SectionInfo{})
		nw.AddInterface(pcapfile.Interface{Name: agent + ":eth0", LinkType: 1})
		data := make([]byte, size)
		for i := range n {
			if nw.WritePacket(0, int64(i*k+idx), uint32(size), data) != nil {
				return
			}
		}
		bw.Flush()
		j, _ := json.Marshal(query.Result{Packets: int64(n), Agents: 1})
		w.Header().Set(queryhttp.TrailerResult, string(j))
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// TestMemoryBounded: ten servers answering 20 MB each are merged with
// the heap staying far below the answers' size (the package doc's
// bound: about 1.2 MiB per server).
func TestMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("streams 200 MB")
	}
	const servers, n, size = 10, 20000, 1000
	var cfg Config
	for i := range servers {
		cfg.Servers = append(cfg.Servers, queryhttp.ClientConfig{Addr: streamServer(t, fmt.Sprintf("a%d", i), i, servers, n, size)})
	}
	runtime.GC()
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	res, err := Run(context.Background(), cfg, io.Discard)
	close(stop)
	<-sampled
	if err != nil || res.Packets != servers*n || res.Late != 0 {
		t.Fatalf("%v, %+v", err, res)
	}
	t.Logf("%d MB merged, heap in use at most %d MiB", res.Bytes>>20, peak.Load()>>20)
	if p := peak.Load(); p > 48<<20 {
		t.Errorf("heap in use up to %d MiB for 10 servers: want under 48", p>>20)
	}
}
