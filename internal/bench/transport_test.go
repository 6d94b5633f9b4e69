package bench

import (
	"context"
	"testing"
	"time"
)

func TestTransportSmall(t *testing.T) {
	res, err := Transport(context.Background(), TransportConfig{Duration: 100 * time.Millisecond, Rounds: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 6 {
		t.Fatalf("%d modes, want 6", len(res))
	}
	for _, r := range res {
		tot := r.Totals()
		t.Logf("%s %4d/frame %6d B: %.0f msg/s, sent %d, received %d", r.Proto, r.PerFrame, r.FrameBytes, r.Median(), tot.Sent, tot.Received)
		if tot.Sent == 0 || tot.Received == 0 || r.Median() <= 0 {
			t.Errorf("%s %d/frame: sent %d, received %d", r.Proto, r.PerFrame, tot.Sent, tot.Received)
		}
		if tot.Received > tot.Sent {
			t.Errorf("%s %d/frame: received %d of %d sent", r.Proto, r.PerFrame, tot.Received, tot.Sent)
		}
		if r.Proto == "tcp" && tot.Received != tot.Sent {
			t.Errorf("tcp %d/frame: received %d of %d sent", r.PerFrame, tot.Received, tot.Sent)
		}
		if r.Proto == "tcp" && tot.FramesReceived != tot.FramesSent {
			t.Errorf("tcp %d/frame: %d frames of %d", r.PerFrame, tot.FramesReceived, tot.FramesSent)
		}
	}
	if got := res[len(res)-1].PerFrame; got != 15 {
		t.Errorf("batched UDP: %d messages per 1432-byte datagram, want 15", got)
	}
	if got := res[len(res)-1].FrameBytes; got > 1432 {
		t.Errorf("batched UDP datagram of %d bytes, over 1432", got)
	}
}

func TestMedianPercentile(t *testing.T) {
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median = %v, want 2", m)
	}
	if m := median([]float64{4, 1, 2, 3}); m != 2.5 {
		t.Errorf("median = %v, want 2.5", m)
	}
	ds := make([]time.Duration, 100)
	for i := range ds {
		ds[i] = time.Duration(i + 1)
	}
	if p := percentile(ds, 99); p != 99 {
		t.Errorf("p99 = %v, want 99", p)
	}
	if p := percentile(ds, 50); p != 50 {
		t.Errorf("p50 = %v, want 50", p)
	}
}
