package pki

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func newCA(t *testing.T, name string) *Authority {
	t.Helper()
	now := time.Now()
	ca, err := NewAuthority(name, now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// writePair issues l with ca and writes it to dir/name.pem and
// dir/name-key.pem.
func writePair(t *testing.T, ca *Authority, dir, name string, l Leaf) (certFile, keyFile string) {
	t.Helper()
	if l.NotAfter.IsZero() {
		l.NotBefore, l.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	}
	c, k, err := ca.Issue(l)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	if err := os.WriteFile(certFile, c, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, k, 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func writeCA(t *testing.T, ca *Authority, dir, name string) string {
	t.Helper()
	f := filepath.Join(dir, name)
	if err := os.WriteFile(f, ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// handshake runs a TLS handshake over an in-memory pipe and returns the
// server's and the client's error.
func handshake(t *testing.T, srv, cli *tls.Config) (serr, cerr error, state tls.ConnectionState) {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, c := tls.Server(a, srv), tls.Client(b, cli)
	done := make(chan error, 1)
	go func() {
		err := s.HandshakeContext(ctx)
		if err == nil {
			// TLS 1.3: the client learns of a rejected certificate on
			// its first read, so give it something to read.
			_, err = s.Write([]byte{1})
		}
		if err != nil {
			s.Close()
		}
		done <- err
	}()
	cerr = c.HandshakeContext(ctx)
	if cerr == nil {
		_, cerr = c.Read(make([]byte, 1))
	}
	serr = <-done
	return serr, cerr, s.ConnectionState()
}

func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	// Another name: the client presents its certificate anyway.
	ca, other := newCA(t, "test CA"), newCA(t, "other CA")
	caFile := writeCA(t, ca, dir, "ca.pem")
	srvCert, srvKey := writePair(t, ca, dir, "srv", Leaf{CommonName: "coll", DNSNames: []string{"coll.example"},
		IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true})
	srv, err := ServerConfig(srvCert, srvKey, caFile)
	if err != nil {
		t.Fatal(err)
	}
	if srv.MinVersion != tls.VersionTLS12 || srv.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Fatalf("server config: min version %x, client auth %v", srv.MinVersion, srv.ClientAuth)
	}
	good, goodKey := writePair(t, ca, dir, "web1", Leaf{CommonName: "web1", DNSNames: []string{"web1"}, Client: true})
	foreign, foreignKey := writePair(t, other, dir, "foreign", Leaf{CommonName: "web1", Client: true})
	old := time.Now().Add(-48 * time.Hour)
	expired, expiredKey := writePair(t, ca, dir, "expired", Leaf{CommonName: "web1", Client: true,
		NotBefore: old, NotAfter: old.Add(time.Hour)})
	serverOnly, serverOnlyKey := writePair(t, ca, dir, "serveronly", Leaf{CommonName: "web1", Server: true})

	tests := []struct {
		name, cert, key, serverName string
		serverErr, clientErr        string // substrings; "" for success, "*" for any error
	}{
		{"good", good, goodKey, "coll.example", "", ""},
		{"good by IP", good, goodKey, "127.0.0.1", "", ""},
		{"no client certificate", "", "", "coll.example", "certificate", "certificate required"},
		{"client from another CA", foreign, foreignKey, "coll.example", "unknown authority", "unknown certificate authority"},
		{"expired client", expired, expiredKey, "coll.example", "expired", "expired certificate"},
		{"client certificate for servers only", serverOnly, serverOnlyKey, "coll.example", "usage", "bad certificate"},
		{"wrong server name", good, goodKey, "other.example", "*", "other.example"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cli, err := ClientConfig(caFile, tt.cert, tt.key, tt.serverName)
			if tt.name == "expired client" {
				// ClientConfig refuses an expired certificate of its own;
				// build the config by hand to see the collector refuse it.
				if err == nil || !strings.Contains(err.Error(), "expired") {
					t.Fatalf("ClientConfig with an expired certificate: %v", err)
				}
				kp, err := tls.LoadX509KeyPair(tt.cert, tt.key)
				if err != nil {
					t.Fatal(err)
				}
				cli, _ = ClientConfig(caFile, "", "", tt.serverName)
				cli.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &kp, nil }
			} else if err != nil {
				t.Fatal(err)
			}
			serr, cerr, st := handshake(t, srv, cli)
			check := func(side string, err error, want string) {
				t.Helper()
				switch {
				case want == "" && err != nil:
					t.Errorf("%s: %v", side, err)
				case want == "*" && err == nil:
					t.Errorf("%s: no error", side)
				case want != "" && want != "*" && (err == nil || !strings.Contains(err.Error(), want)):
					t.Errorf("%s error %v, want one containing %q", side, err, want)
				}
			}
			check("server", serr, tt.serverErr)
			check("client", cerr, tt.clientErr)
			if tt.serverErr == "" && tt.clientErr == "" {
				if len(st.PeerCertificates) == 0 {
					t.Fatal("no verified client certificate")
				}
				if err := CheckIdentity(st.PeerCertificates[0], "web1"); err != nil {
					t.Fatal(err)
				}
				if st.Version != tls.VersionTLS13 {
					t.Errorf("negotiated %x, want TLS 1.3", st.Version)
				}
			}
		})
	}
}

func TestCheckIdentity(t *testing.T) {
	cert := &x509.Certificate{DNSNames: []string{"web1", "web1.example"}}
	cert.Subject.CommonName = "web-cn"
	for _, ok := range []string{"web-cn", "web1", "web1.example"} {
		if err := CheckIdentity(cert, ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"web2", "WEB1", "web", "", "web1.example.org"} {
		err := CheckIdentity(cert, bad)
		if !errors.Is(err, ErrIdentity) || !strings.Contains(err.Error(), "web-cn") {
			t.Errorf("%q: %v, want ErrIdentity naming the certificate", bad, err)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "test CA")
	old := time.Now().Add(-48 * time.Hour)
	expCert, expKey := writePair(t, ca, dir, "exp", Leaf{CommonName: "c", Server: true, NotBefore: old, NotAfter: old.Add(time.Hour)})
	futCert, futKey := writePair(t, ca, dir, "fut", Leaf{CommonName: "c", Server: true,
		NotBefore: time.Now().Add(time.Hour), NotAfter: time.Now().Add(2 * time.Hour)})
	goodCert, goodKey := writePair(t, ca, dir, "good", Leaf{CommonName: "c", Server: true})
	empty := filepath.Join(dir, "empty.pem")
	os.WriteFile(empty, []byte("nothing here\n"), 0o644)
	tests := []struct {
		name string
		fn   func() error
		want string
	}{
		{"expired server", func() error { _, err := ServerConfig(expCert, expKey, ""); return err }, "expired"},
		{"not yet valid", func() error { _, err := ServerConfig(futCert, futKey, ""); return err }, "not valid before"},
		{"no key", func() error { _, err := ServerConfig(goodCert, "", ""); return err }, "both needed"},
		{"key of another cert", func() error { _, err := ServerConfig(goodCert, expKey, ""); return err }, "private key does not match"},
		{"missing CA", func() error { _, err := ServerConfig(goodCert, goodKey, filepath.Join(dir, "nope")); return err }, "no such file"},
		{"CA without certificates", func() error { _, err := ClientConfig(empty, "", "", ""); return err }, "no PEM certificate"},
		{"client cert without key", func() error { _, err := ClientConfig("", goodCert, "", ""); return err }, "go together"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.fn(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
	cfg, err := ClientConfig("", "", "", "")
	if err != nil || cfg.RootCAs != nil || cfg.MinVersion != tls.VersionTLS12 {
		t.Fatalf("default client config: %+v, %v (want system roots, TLS 1.2+)", cfg, err)
	}
}

func TestWriteSet(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	res, err := WriteSet(dir, Set{Collector: []string{"coll.example", "127.0.0.1"}, Agents: []string{"host1", "host2"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Written) != 8 || len(res.Kept) != 0 || len(res.Reissued) != 0 {
		t.Fatalf("first run: %+v", res)
	}
	for _, f := range res.Written {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		want := os.FileMode(0o644)
		if strings.HasSuffix(f, "-key.pem") {
			want = 0o600
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", f, fi.Mode().Perm(), want)
		}
	}
	caFile := filepath.Join(dir, CAFile)
	srv, err := ServerConfig(filepath.Join(dir, CollectorFile), filepath.Join(dir, CollectorKeyFile), caFile)
	if err != nil {
		t.Fatal(err)
	}
	leaf := srv.Certificates[0].Leaf
	if leaf.Subject.CommonName != "coll.example" || !slices.Equal(leaf.DNSNames, []string{"coll.example"}) ||
		len(leaf.IPAddresses) != 1 || !leaf.IPAddresses[0].Equal(net.IPv4(127, 0, 0, 1)) {
		t.Fatalf("collector certificate names: CN %q, DNS %q, IPs %v", leaf.Subject.CommonName, leaf.DNSNames, leaf.IPAddresses)
	}
	cf, kf := AgentFiles("host2")
	cli, err := ClientConfig(caFile, filepath.Join(dir, cf), filepath.Join(dir, kf), "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	serr, cerr, st := handshake(t, srv, cli)
	if serr != nil || cerr != nil {
		t.Fatalf("handshake with generated certificates: server %v, client %v", serr, cerr)
	}
	if err := CheckIdentity(st.PeerCertificates[0], "host2"); err != nil {
		t.Fatal(err)
	}

	// Again with one more agent: the CA and the existing agent
	// certificates are kept, the new agent is signed by the same CA.
	res, err = WriteSet(dir, Set{Collector: []string{"coll.example", "127.0.0.1"}, Agents: []string{"host1", "host3"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Written) != 2 || len(res.Kept) != 4 || len(res.Reissued) != 0 {
		t.Fatalf("second run: %+v", res)
	}
	cf, kf = AgentFiles("host3")
	cli, err = ClientConfig(caFile, filepath.Join(dir, cf), filepath.Join(dir, kf), "coll.example")
	if err != nil {
		t.Fatal(err)
	}
	if serr, cerr, _ := handshake(t, srv, cli); serr != nil || cerr != nil {
		t.Fatalf("agent added later: server %v, client %v", serr, cerr)
	}
	if _, err := WriteSet(dir, Set{Agents: []string{"../evil"}}); err == nil {
		t.Fatal("an agent name with a path was accepted")
	}
}

// TestWriteSetReissues: a certificate that is not what is asked (other
// names, another CA, the wrong key) is reissued from the CA in place,
// keeping the CA and the other certificates; one that is, is kept.
func TestWriteSetReissues(t *testing.T) {
	dir := t.TempDir()
	set := Set{Collector: []string{"coll.example", "192.0.2.10"}, Agents: []string{"web1"}}
	if _, err := WriteSet(dir, set); err != nil {
		t.Fatal(err)
	}
	read := func(name string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	snapshot := func() map[string][]byte {
		t.Helper()
		m := map[string][]byte{}
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			m[e.Name()] = read(e.Name())
		}
		return m
	}
	other := newCA(t, "other CA")
	otherCert, _, err := other.Issue(Leaf{CommonName: "web1", DNSNames: []string{"web1"}, Client: true, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	_, strayKey, err := other.Issue(Leaf{CommonName: "x", Server: true, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		before func()
		set    Set
		file   string // reissued; "" for none
		why    string
	}{
		{"same names", nil, set, "", ""},
		{"same names in another order", nil, Set{Collector: []string{"coll.example", "192.0.2.10"}, Agents: []string{"web1"}}, "", ""},
		{"new collector names", nil, Set{Collector: []string{"coll.example", "pcap.example.net", "192.0.2.10", "2001:db8::1"}},
			CollectorFile, "names coll.example, pcap.example.net, 192.0.2.10, 2001:db8::1; it had coll.example, 192.0.2.10"},
		{"another CA's agent certificate", func() { os.WriteFile(filepath.Join(dir, "agent-web1.pem"), otherCert, 0o644) },
			Set{Agents: []string{"web1"}}, "agent-web1.pem", `not signed by the CA "pcapsync CA"`},
		{"a key of another certificate", func() { os.WriteFile(filepath.Join(dir, "agent-web1-key.pem"), strayKey, 0o600) },
			Set{Agents: []string{"web1"}}, "agent-web1.pem", "its key agent-web1-key.pem: tls: private key does not match public key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.before != nil {
				tc.before()
			}
			before := snapshot()
			res, err := WriteSet(dir, tc.set)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Written) != 0 {
				t.Errorf("written %q, want nothing new", res.Written)
			}
			keyFile := strings.TrimSuffix(tc.file, ".pem") + "-key.pem"
			after := snapshot()
			if len(after) != len(before) {
				t.Errorf("%d files, %d before", len(after), len(before))
			}
			for name, b := range before { // the CA and the other certificates kept
				if changed := !slices.Equal(after[name], b); changed != (tc.file != "" && (name == tc.file || name == keyFile)) {
					t.Errorf("%s: changed %v", name, changed)
				}
			}
			if tc.file == "" {
				if len(res.Reissued) != 0 {
					t.Fatalf("reissued %+v, want everything kept", res.Reissued)
				}
				return
			}
			if len(res.Reissued) != 1 || res.Reissued[0].Cert != filepath.Join(dir, tc.file) || !strings.Contains(res.Reissued[0].Why, tc.why) {
				t.Fatalf("reissued %+v, want %s because %q", res.Reissued, tc.file, tc.why)
			}
			cf, kf := filepath.Join(dir, tc.file), filepath.Join(dir, keyFile)
			pair, err := tls.LoadX509KeyPair(cf, kf)
			if err != nil {
				t.Fatalf("the reissued pair: %v", err)
			}
			leaf, err := x509.ParseCertificate(pair.Certificate[0])
			if err != nil {
				t.Fatal(err)
			}
			ca, err := LoadAuthority(filepath.Join(dir, CAFile), filepath.Join(dir, CAKeyFile))
			if err != nil {
				t.Fatal(err)
			}
			if err := leaf.CheckSignatureFrom(ca.Cert); err != nil {
				t.Errorf("the reissued certificate is not signed by the kept CA: %v", err)
			}
		})
	}
	leaf := parseCertFile(t, filepath.Join(dir, CollectorFile))
	if !slices.Equal(leaf.DNSNames, []string{"coll.example", "pcap.example.net"}) || len(leaf.IPAddresses) != 2 ||
		!leaf.IPAddresses[0].Equal(net.ParseIP("192.0.2.10")) || !leaf.IPAddresses[1].Equal(net.ParseIP("2001:db8::1")) {
		t.Errorf("collector certificate: DNS %q, IPs %v", leaf.DNSNames, leaf.IPAddresses)
	}
}

// parseCertFile parses the first certificate of a PEM file.
func parseCertFile(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(path, strings.TrimSuffix(path, ".pem")+"-key.pem")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}
