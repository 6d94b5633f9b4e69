package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pcapsync/pcapsync/internal/kafkarec"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// TestGenCertsReissue: gen certs rerun with other --collector names
// reissues collector.pem from the CA it keeps, with the new names, and
// says so; rerun with the same names it keeps it.
func TestGenCertsReissue(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	gen := func(collector string) string {
		t.Helper()
		var out bytes.Buffer
		if err := run(context.Background(), []string{"gen", "certs", "--dir", dir, "--collector", collector, "--agents", "web1"}, &out, &out); err != nil {
			t.Fatalf("gen certs --collector %s: %v\n%s", collector, err, out.String())
		}
		return out.String()
	}
	read := func(name string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	gen("central.example,192.0.2.10")
	ca, agent := read("ca.pem"), read("agent-web1.pem")

	out := gen("central.example,pcap.example.net,192.0.2.10,192.0.2.11")
	want := "reissued " + filepath.Join(dir, "collector.pem") + " (names central.example, pcap.example.net, 192.0.2.10, 192.0.2.11; it had central.example, 192.0.2.10)"
	for _, w := range []string{want, "kept     " + filepath.Join(dir, "ca.pem"), "kept     " + filepath.Join(dir, "agent-web1.pem")} {
		if !strings.Contains(out, w) {
			t.Errorf("second run lacks %q:\n%s", w, out)
		}
	}
	if !bytes.Equal(read("ca.pem"), ca) || !bytes.Equal(read("agent-web1.pem"), agent) {
		t.Error("the CA or the agent's certificate changed")
	}
	block, _ := pem.Decode(read("collector.pem"))
	if block == nil {
		t.Fatal("collector.pem: no PEM block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	var ips []string
	for _, ip := range cert.IPAddresses {
		ips = append(ips, ip.String())
	}
	if cert.Subject.CommonName != "central.example" || !slices.Equal(cert.DNSNames, []string{"central.example", "pcap.example.net"}) ||
		!slices.Equal(ips, []string{"192.0.2.10", "192.0.2.11"}) {
		t.Errorf("collector.pem: CN %q, DNS %q, IPs %q", cert.Subject.CommonName, cert.DNSNames, ips)
	}
	caBlock, _ := pem.Decode(ca)
	caCert, err := x509.ParseCertificate(caBlock.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if err := cert.CheckSignatureFrom(caCert); err != nil {
		t.Errorf("the reissued collector.pem is not signed by the kept CA: %v", err)
	}

	coll := read("collector.pem")
	out = gen("central.example,pcap.example.net,192.0.2.10,192.0.2.11")
	if !strings.Contains(out, "kept     "+filepath.Join(dir, "collector.pem")) || strings.Contains(out, "reissued") || !bytes.Equal(read("collector.pem"), coll) {
		t.Errorf("third run, same names: collector.pem not kept:\n%s", out)
	}
}

// TestGenAgentKey: gen kafka-agent-key writes an agent's key file (0600,
// never over an existing file) that the agent's records are signed
// with and a writer with the topic's key verifies; another agent's
// records signed with it are refused; an agent's key derives none.
func TestGenAgentKey(t *testing.T) {
	dir := t.TempDir()
	topicFile := filepath.Join(dir, "topic.key")
	if err := os.WriteFile(topicFile, []byte("a-record-key-of-the-site-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "web1.key")
	args := []string{"gen", "kafka-agent-key", "--kafka-record-key", topicFile, "--agent", "web1", "--out", out}
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	st, err := os.Stat(out)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the key file: %v, mode %v; want 0600", err, st.Mode())
	}
	if err := run(context.Background(), args, &stdout, &stderr); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("over an existing key file: %v, want it refused", err)
	}
	b, _ := os.ReadFile(out)
	own, err := kafkarec.ParseRecordKey(b)
	if err != nil || own.Agent() != "web1" {
		t.Fatalf("the key file parses: %v, agent %q", err, own.Agent())
	}
	tb, _ := os.ReadFile(topicFile)
	topic, _ := kafkarec.ParseRecordKey(tb)
	for _, agent := range []string{"web1", "web2"} {
		r := kafkarec.NewRecord("t", agent, wire.AppendHello(nil, &wire.Hello{Name: agent}), nil, []byte("value"))
		own.Sign(r)
		if err := topic.Verify(r); (agent == "web1") != (err == nil) {
			t.Errorf("a record of %s signed with web1's key: %v", agent, err)
		}
	}
	for _, bad := range [][]string{
		{"gen", "kafka-agent-key", "--agent", "web1"},
		{"gen", "kafka-agent-key", "--kafka-record-key", out, "--agent", "web2"},
		{"gen", "kafka-agent-key", "--kafka-record-key", topicFile, "--agent", "-x"},
	} {
		if err := run(context.Background(), bad, &stdout, &stderr); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}
