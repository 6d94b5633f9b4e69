package bench

import (
	"context"
	"testing"
	"time"
)

func TestFaninSmall(t *testing.T) {
	r, err := Fanin(context.Background(), FaninConfig{Agents: 50, Rate: 10, Size: 100, Duration: time.Second, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", r)
	if r.Connected != 50 {
		t.Errorf("%d agents connected, want 50", r.Connected)
	}
	// 50 agents x 10 packets/s x 1 s, give or take the last tick.
	if r.Sent < 400 || r.Sent > 600 {
		t.Errorf("sent %d packets, want about 500", r.Sent)
	}
	if r.Written != r.Sent {
		t.Errorf("collector wrote %d packets, agents sent %d", r.Written, r.Sent)
	}
	if r.Acked != r.Batches {
		t.Errorf("%d of %d batches acknowledged", r.Acked, r.Batches)
	}
	if r.AgentErrors != 0 || r.CollectorErrors != 0 {
		t.Errorf("%d agent errors (first: %v), %d collector errors", r.AgentErrors, r.FirstError, r.CollectorErrors)
	}
	if r.AckP50 <= 0 || r.AckP99 < r.AckP50 || r.AckMax < r.AckP99 {
		t.Errorf("ack latency p50 %v p99 %v max %v", r.AckP50, r.AckP99, r.AckMax)
	}
	if r.PeakRSS <= 0 || r.CPUUser+r.CPUSys <= 0 {
		t.Errorf("peak RSS %d, CPU %v+%v", r.PeakRSS, r.CPUUser, r.CPUSys)
	}
}

func TestMaxAgents(t *testing.T) {
	for _, tc := range []struct {
		nofile uint64
		want   int
	}{{0, 0}, {fdSlack, 0}, {20000, 6581}, {30256, 10000}} {
		if got := MaxAgents(tc.nofile); got != tc.want {
			t.Errorf("MaxAgents(%d) = %d, want %d", tc.nofile, got, tc.want)
		}
	}
}
