package federate

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/query"
	"github.com/pcapsync/pcapsync/internal/queryhttp"
)

// fakeSource is a server answering body, its Result saying packets.
func fakeSource(idx int, body []byte, packets int64, budget *atomic.Int64) *source {
	s := newSource(idx, queryhttp.ClientConfig{Addr: fmt.Sprintf("s%d:1", idx)}, time.Minute, budget)
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	s.stall = time.AfterFunc(time.Hour, func() {})
	s.stall.Stop()
	s.body = bytes.NewReader(body)
	s.result = func() (query.Result, error) { return query.Result{Packets: packets, Agents: 1}, nil }
	s.start()
	return s
}

// FuzzSource: whatever a server sends, the merge neither panics nor
// grows without bound; the output is a valid pcapng holding every
// packet of the good server and as many packets as the Result says.
func FuzzSource(f *testing.F) {
	t := &testing.T{}
	good := stream{comment: "c", stats: true, pkts: []pk{{iface: "a:e", ts: 1}, {iface: "b:e", ts: 5}, {iface: "a:e", ts: 9}}}.bytes(t)
	f.Add(good, int64(3))
	f.Add(good[:len(good)-7], int64(3))
	f.Add(good, int64(2))
	f.Add([]byte{}, int64(0))
	f.Add(append(bytes.Clone(good), 6, 0, 0, 0, 0xfc, 0xff, 0xff, 0xff), int64(3))
	f.Add(append(bytes.Clone(good[:28]), 1, 0, 0, 0, 20, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 20, 0, 0, 0), int64(0))
	f.Fuzz(func(t *testing.T, body []byte, packets int64) {
		budget := &atomic.Int64{}
		budget.Store(MaxStatsBytes)
		srcs := []*source{fakeSource(0, good, 3, budget), fakeSource(1, body, packets, budget)}
		var out bytes.Buffer
		res, err := mergeSources(context.Background(), Config{Servers: make([]queryhttp.ClientConfig, 2), Partial: true}, srcs, &out)
		if err != nil {
			t.Fatalf("partial: %v", err)
		}
		if o := res.Servers[1].Outcome; o != OutcomeOK && o != OutcomeFailed || o == OutcomeOK && res.Partial {
			t.Fatalf("outcome %q, partial %v", o, res.Partial)
		}
		r, err := pcapfile.NewReader(&out, nil)
		if err != nil {
			t.Fatal(err)
		}
		n, fromGood := int64(0), 0
		for {
			var p pcapfile.Packet
			err := r.ReadInto(&p)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("output: %v", err)
			}
			n++
			if bytes.HasPrefix([]byte(r.Interfaces()[p.Interface].Description), []byte("server s0:1")) {
				fromGood++
			}
		}
		if n != res.Packets || fromGood != 3 || res.Servers[0].Packets != 3 {
			t.Fatalf("%d packets read, result %+v, %d of the good server", n, res, fromGood)
		}
	})
}
