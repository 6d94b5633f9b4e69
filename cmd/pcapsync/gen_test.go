package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
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
