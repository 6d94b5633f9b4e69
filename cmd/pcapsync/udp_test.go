package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/pcapsync/pcapsync/internal/pki/pkitest"
)

// TestUDPFlags: every bad combination of the UDP (and metrics) flags is
// a usage error that names the flag.
func TestUDPFlags(t *testing.T) {
	agent := []string{"agent", "--collector", "127.0.0.1:1", "--read", "in.pcap"}
	ca := pkitest.New(t).CAFile
	for _, tc := range []struct {
		args []string
		want string
	}{
		{append(agent, "--transport", "udp"), "UDP is plaintext (no DTLS): set Insecure (--insecure)"},
		{append(agent, "--transport", "udp", "--tls-ca", ca), "UDP is plaintext (no DTLS): set Insecure (--insecure), and no TLS"},
		{append(agent, "--transport", "udp", "--insecure", "--mtu", "100"), "MTU 100 out of range 576..65535 (--mtu)"},
		{append(agent, "--transport", "udp", "--insecure", "--batch-size", "64K"), "batch size (--batch-size) does not apply to the UDP transport"},
		{append(agent, "--transport", "udp", "--insecure", "--spool", "/tmp/s"), "spool (--spool) keeps batches until acknowledged, and UDP acknowledges nothing"},
		{append(agent, "--insecure", "--mtu", "9000"), "MTU (--mtu) applies to the UDP transport only"},
		{append(agent, "--insecure", "--transport", "quic"), `transport "quic": want tcp or udp (--transport)`},
		{append(agent, "--insecure", "--tls-ca", ca), "TLS (the --tls flags) and Insecure (--insecure) exclude each other"},
		{agent, "no transport security chosen"},
		{append(agent, "--insecure", "--ring-size", "64M", "--ring-time", "1s"), "ring size (--ring-size) and a ring time (--ring-time) exclude each other"},
		{append(agent, "--insecure", "--block-size", "2G"), "block size 2147483648 above"},
		{[]string{"collector", "--dir", "out", "--listen-udp", "127.0.0.1:0"}, "--listen-udp: UDP is plaintext"},
		{[]string{"collector", "--dir", "out", "--listen-udp", "127.0.0.1:0", "--tls-cert", "c.pem", "--tls-key", "k.pem"}, "--listen-udp: UDP is plaintext"},
		{[]string{"collector", "--dir", "out", "--insecure", "--tls-cert", "c.pem", "--tls-key", "k.pem"}, "exclude each other (except with --listen-udp"},
		// TLS for TCP and plaintext UDP together: past the flag checks,
		// stopped by the missing certificate file.
		{[]string{"collector", "--dir", "out", "--insecure", "--listen-udp", "127.0.0.1:0", "--tls-cert", "no-such.pem", "--tls-key", "k.pem"}, "no-such.pem"},
		// The metrics flags (metrics.go).
		{append(agent, "--insecure", "--pprof"), "profiler (--pprof) needs a listener (--metrics HOST:PORT)"},
		{[]string{"collector", "--dir", "out", "--insecure", "--pprof"}, "profiler (--pprof) needs a listener (--metrics HOST:PORT)"},
		{[]string{"collector", "--dir", "out", "--insecure", "--metrics", "127.0.0.1:0", "--metrics-max-agents", "-2"}, "max agents -2: want a positive number, or -1 for no cap (--metrics-max-agents)"},
		{[]string{"status", "--metrics", ""}, "status: --metrics is empty"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), tc.args, &out, &errOut)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want a usage error with %q", tc.args, err, tc.want)
		}
	}
}
