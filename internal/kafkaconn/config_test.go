package kafkaconn

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pcapsync/pcapsync/internal/pki"
	"github.com/pcapsync/pcapsync/internal/pki/pkitest"
)

func TestValidate(t *testing.T) {
	ok := func(c Config) Config {
		if c.Brokers == nil {
			c.Brokers = []string{"kafka1:9092"}
		}
		return c
	}
	tests := []struct {
		name string
		cfg  Config
		want string // "" valid, else a substring of the error
	}{
		{"zero but brokers", ok(Config{}), ""},
		{"several brokers, IPv6", ok(Config{Brokers: []string{"kafka1:9092", "10.0.0.2:9093", "[::1]:9094"}}), ""},
		{"no brokers", Config{}, "no broker address"},
		{"broker without port", ok(Config{Brokers: []string{"kafka1"}}), `broker address "kafka1": want host:port`},
		{"broker without host", ok(Config{Brokers: []string{":9092"}}), "want host:port"},
		{"broker port 0", ok(Config{Brokers: []string{"kafka1:0"}}), `port "0"`},
		{"broker port too big", ok(Config{Brokers: []string{"kafka1:65536"}}), `port "65536"`},
		{"broker port a name", ok(Config{Brokers: []string{"kafka1:kafka"}}), `port "kafka"`},
		{"topic of every allowed character", ok(Config{Topic: "Pcap.sync_0-9"}), ""},
		{"topic of 249", ok(Config{Topic: strings.Repeat("t", 249)}), ""},
		{"topic of 250", ok(Config{Topic: strings.Repeat("t", 250)}), "250 characters"},
		{"topic .", ok(Config{Topic: "."}), `"." is not allowed`},
		{"topic ..", ok(Config{Topic: ".."}), `".." is not allowed`},
		{"topic with a slash", ok(Config{Topic: "a/b"}), `holds '/'`},
		{"topic with a space", ok(Config{Topic: "a b"}), `holds ' '`},
		{"topic not ASCII", ok(Config{Topic: "pcäp"}), `holds 'ä'`},
		{"client id with a newline", ok(Config{ClientID: "a\nb"}), "printable ASCII"},
		{"client id too long", ok(Config{ClientID: strings.Repeat("c", 256)}), "printable ASCII"},
		{"negative partitions", ok(Config{Partitions: -1}), "-1 partitions"},
		{"replication -1", ok(Config{Replication: -1}), ""},
		{"replication 3", ok(Config{Replication: 3}), ""},
		{"replication -2", ok(Config{Replication: -2}), "replication factor -2"},
		{"TLS with a CA", ok(Config{CAFile: "ca.pem"}), ""},
		{"TLS client certificate", ok(Config{CertFile: "c.pem", KeyFile: "k.pem"}), ""},
		{"key without certificate", ok(Config{KeyFile: "k.pem"}), "client key without its certificate"},
		{"certificate without key", ok(Config{CertFile: "c.pem"}), "client certificate without its key"},
		{"SCRAM-SHA-512", ok(Config{SASL: SCRAMSHA512, User: "alice", PasswordFile: "p"}), ""},
		{"scram-sha-256 in lower case", ok(Config{SASL: "scram-sha-256", User: "alice", PasswordFile: "p"}), ""},
		{"SASL PLAIN", ok(Config{SASL: "PLAIN", User: "alice", PasswordFile: "p"}), `mechanism "PLAIN"`},
		{"SASL without user", ok(Config{SASL: SCRAMSHA512, PasswordFile: "p"}), "needs a user and a password file"},
		{"SASL without password file", ok(Config{SASL: SCRAMSHA512, User: "alice"}), "needs a user and a password file"},
		{"user without SASL", ok(Config{User: "alice"}), "without a SASL mechanism"},
		{"password file without SASL", ok(Config{PasswordFile: "p"}), "without a SASL mechanism"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate: %v, want an error containing %q", err, tt.want)
			case err != nil && !strings.HasPrefix(err.Error(), "kafka: "):
				t.Fatalf("Validate: %q does not start with kafka:", err)
			}
			if _, oerr := tt.cfg.Opts(); err != nil && (oerr == nil || oerr.Error() != err.Error()) {
				t.Fatalf("Opts: %v, want Validate's refusal", oerr)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	c := Config{SASL: "scram-sha-512"}.WithDefaults()
	if c.Topic != DefaultTopic || c.ClientID != DefaultClientID || c.Partitions != DefaultPartitions ||
		c.Replication != DefaultReplication || c.SASL != SCRAMSHA512 {
		t.Fatalf("WithDefaults of a zero Config: %+v", c)
	}
	if DefaultPartitions != 12 || DefaultReplication != -1 {
		t.Fatalf("defaults %d partitions, replication %d: the issue asks 12 and the brokers' default", DefaultPartitions, DefaultReplication)
	}
	for _, tt := range []struct {
		c    Config
		want bool
	}{
		{Config{}, false},
		{Config{TLS: true}, true},
		{Config{CAFile: "x"}, true},
		{Config{CertFile: "x"}, true},
		{Config{ServerName: "x"}, true},
		{Config{SASL: SCRAMSHA256}, false},
	} {
		if got := tt.c.TLSEnabled(); got != tt.want {
			t.Errorf("%+v.TLSEnabled() = %v", tt.c, got)
		}
	}
}

// TestOptsFiles: Opts reads the TLS files and the password file, and
// says which one it could not use.
func TestOptsFiles(t *testing.T) {
	p := pkitest.New(t)
	cert, key := p.Issue(t, p.CA, "writer", pki.Leaf{CommonName: "writer", Client: true})
	dir := t.TempDir()
	pass := writeFile(t, dir, "pass", "  secret\n")
	empty := writeFile(t, dir, "empty", " \n\n")
	base := Config{Brokers: []string{"127.0.0.1:9092"}}
	tests := []struct {
		name string
		edit func(*Config)
		n    int    // options on success: seed brokers, client id, TLS, SASL
		want string // "" success, else a substring of the error
		is   error
	}{
		{"plain", func(*Config) {}, 2, "", nil},
		{"TLS with system roots", func(c *Config) { c.TLS = true }, 3, "", nil},
		{"TLS with CA and client certificate", func(c *Config) { c.CAFile, c.CertFile, c.KeyFile = p.CAFile, cert, key }, 3, "", nil},
		{"SCRAM over TLS", func(c *Config) { c.CAFile, c.SASL, c.User, c.PasswordFile = p.CAFile, SCRAMSHA512, "alice", pass }, 4, "", nil},
		{"missing CA file", func(c *Config) { c.CAFile = filepath.Join(dir, "nope.pem") }, 0, "no such file", os.ErrNotExist},
		{"CA file without certificates", func(c *Config) { c.CAFile = pass }, 0, "holds no PEM certificate", nil},
		{"key of another certificate", func(c *Config) { c.CertFile, c.KeyFile = cert, p.ServerKey }, 0, "private key does not match", nil},
		{"missing password file", func(c *Config) { c.SASL, c.User, c.PasswordFile = SCRAMSHA256, "alice", filepath.Join(dir, "nope") }, 0, "SASL password file", os.ErrNotExist},
		{"empty password file", func(c *Config) { c.SASL, c.User, c.PasswordFile = SCRAMSHA256, "alice", empty }, 0, "empty", ErrEmptyPassword},
		{"invalid config", func(c *Config) { c.Topic = ".." }, 0, "not allowed", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			tt.edit(&c)
			opts, err := c.Opts()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Opts: %v", err)
			case tt.want == "" && len(opts) != tt.n:
				t.Fatalf("Opts: %d options, want %d", len(opts), tt.n)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Opts: %v, want an error containing %q", err, tt.want)
			case tt.is != nil && !errors.Is(err, tt.is):
				t.Fatalf("Opts: %v, want one wrapping %v", err, tt.is)
			}
		})
	}
	if got, err := readPassword(pass); err != nil || got != "secret" {
		t.Fatalf("readPassword = %q, %v; want the file without surrounding white space", got, err)
	}
}

// TestRecordKey: the record key file's content without surrounding
// white space; none without a file; an empty or missing file refused.
func TestRecordKey(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, tt := range []struct {
		name, file string
		want       string
		err        error // nil: accepted
	}{
		{"none", "", "", nil},
		{"trimmed", write("k", "  0123456789abcdef\n"), "0123456789abcdef", nil},
		{"empty", write("e", " \n\t"), "", ErrEmptyRecordKey},
		{"missing", filepath.Join(dir, "no-such"), "", os.ErrNotExist},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Config{RecordKeyFile: tt.file}.RecordKey()
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("error %v, want %v", err, tt.err)
				}
				return
			}
			if err != nil || string(got) != tt.want || (tt.file == "" && got != nil) {
				t.Fatalf("RecordKey() = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}
