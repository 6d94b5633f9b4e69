package bench

import "testing"

func TestPerfLine(t *testing.T) {
	out := `3 records sent, 0.6 records/sec (0.54 MB/sec), 1000.0 ms avg latency, 1500.0 ms max latency.
360 records sent, 150.25 records/sec (128.90 MB/sec), 180.23 ms avg latency, 400.00 ms max latency, 170 ms 50th, 380 ms 95th, 400 ms 99th, 400 ms 99.9th.
`
	m := perfLineRE.FindAllStringSubmatch(out, -1)
	if len(m) != 1 || m[0][1] != "360" || m[0][2] != "150.25" {
		t.Errorf("matches %q", m)
	}
}
