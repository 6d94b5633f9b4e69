package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

// TestUDPFlags: every bad combination of the UDP (and metrics) flags is
// a usage error that names the flag.
func TestUDPFlags(t *testing.T) {
	agent := []string{"agent", "--collector", "127.0.0.1:1", "--read", "in.pcap"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{append(agent, "--transport", "udp"), "--transport udp is plaintext"},
		{append(agent, "--transport", "udp", "--tls-ca", "ca.pem"), "--transport udp is plaintext"},
		{append(agent, "--transport", "udp", "--insecure", "--mtu", "100"), "--mtu 100 out of range"},
		{append(agent, "--transport", "udp", "--insecure", "--batch-size", "64K"), "--batch-size does not apply"},
		{append(agent, "--transport", "udp", "--insecure", "--spool", "/tmp/s"), "--spool needs --transport tcp"},
		{append(agent, "--insecure", "--mtu", "9000"), "--mtu applies to --transport udp only"},
		{append(agent, "--insecure", "--transport", "quic"), `--transport "quic"`},
		{[]string{"collector", "--dir", "out", "--listen-udp", "127.0.0.1:0"}, "--listen-udp: UDP is plaintext"},
		{[]string{"collector", "--dir", "out", "--listen-udp", "127.0.0.1:0", "--tls-cert", "c.pem", "--tls-key", "k.pem"}, "--listen-udp: UDP is plaintext"},
		{[]string{"collector", "--dir", "out", "--insecure", "--tls-cert", "c.pem", "--tls-key", "k.pem"}, "exclude each other (except with --listen-udp"},
		// TLS for TCP and plaintext UDP together: past the flag checks,
		// stopped by the missing certificate file.
		{[]string{"collector", "--dir", "out", "--insecure", "--listen-udp", "127.0.0.1:0", "--tls-cert", "no-such.pem", "--tls-key", "k.pem"}, "no-such.pem"},
		// The metrics flags (metrics.go).
		{append(agent, "--insecure", "--pprof"), "--pprof needs --metrics"},
		{[]string{"collector", "--dir", "out", "--insecure", "--pprof"}, "--pprof needs --metrics"},
		{[]string{"collector", "--dir", "out", "--insecure", "--metrics", "127.0.0.1:0", "--metrics-max-agents", "0"}, "--metrics-max-agents 0"},
		{[]string{"status"}, "give --collector-admin"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), tc.args, &out, &errOut)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want a usage error with %q", tc.args, err, tc.want)
		}
	}
}
