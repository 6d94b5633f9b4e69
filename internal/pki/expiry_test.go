package pki

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestReadCertificates(t *testing.T) {
	dir := t.TempDir()
	now := time.Now().Truncate(time.Second)
	ca, err := NewAuthority("site CA", now.Add(-time.Hour), now.Add(48*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	leaf, key, err := ca.Issue(Leaf{CommonName: "web1", Client: true, NotAfter: now.Add(24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b ...[]byte) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, bytes.Join(b, nil), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	chain := write("chain.pem", key, leaf, ca.CertPEM) // a key first, then the leaf and its issuer
	caFile := write("ca.pem", ca.CertPEM)
	got, err := CertificateFiles([2]string{RoleCert, chain}, [2]string{RoleCA, ""}, [2]string{RoleCA, caFile})
	if err != nil {
		t.Fatal(err)
	}
	want := []Certificate{
		{File: chain, Role: RoleCert, Subject: "web1", NotAfter: now.Add(24 * time.Hour)},
		{File: chain, Role: RoleCert, Subject: "site CA", NotAfter: now.Add(48 * time.Hour)},
		{File: caFile, Role: RoleCA, Subject: "site CA", NotAfter: now.Add(48 * time.Hour)},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d certificates %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.File != w.File || g.Role != w.Role || g.Subject != w.Subject || !g.NotAfter.Equal(w.NotAfter) {
			t.Errorf("certificate %d: got %+v, want %+v", i, g, w)
		}
	}

	for _, tt := range []struct{ name, content, want string }{
		{"key only", string(key), "holds no PEM certificate"},
		{"garbage", "not PEM", "holds no PEM certificate"},
		{"bad DER", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "certificate 1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := write(tt.name+".pem", []byte(tt.content))
			_, err := ReadCertificates(RoleCA, p)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), p) {
				t.Errorf("error %v, want one naming %s and saying %q", err, p, tt.want)
			}
		})
	}
	if _, err := ReadCertificates(RoleCA, filepath.Join(dir, "missing.pem")); err == nil {
		t.Error("a missing file: no error")
	}
}
