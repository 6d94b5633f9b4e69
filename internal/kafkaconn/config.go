package kafkaconn

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/pcapsync/pcapsync/internal/pki"
)

// Defaults of a zero Config.
const (
	// DefaultTopic is the topic of a Config without one.
	DefaultTopic = "pcapsync"
	// DefaultClientID is the client.id the brokers see (their logs,
	// quotas and request metrics name it).
	DefaultClientID = "pcapsync"
	// DefaultPartitions is the partition count of a topic EnsureTopic
	// creates: room for a dozen writers.
	DefaultPartitions int32 = 12
	// DefaultReplication is the replication factor of a topic
	// EnsureTopic creates: -1 takes the brokers' own
	// default.replication.factor.
	DefaultReplication int16 = -1
)

// SASL mechanisms Config.SASL accepts (in any case).
const (
	SCRAMSHA256 = "SCRAM-SHA-256"
	SCRAMSHA512 = "SCRAM-SHA-512"
)

// MaxTopicLen is Kafka's limit on a topic name.
const MaxTopicLen = 249

// Config is how to reach the brokers and which topic to use. The zero
// value of every field but Brokers means its default; Validate checks
// every rule, Opts calls it.
type Config struct {
	// Brokers are the bootstrap addresses, host:port each (the client
	// learns the other brokers from them).
	Brokers []string
	// Topic is the topic records go to ("": DefaultTopic): 1 to 249 of
	// [a-zA-Z0-9._-], not "." or "..".
	Topic string
	// ClientID is the client.id sent to the brokers ("":
	// DefaultClientID); printable ASCII, at most 255 bytes.
	ClientID string
	// Partitions and Replication are for EnsureTopic, when it creates
	// the topic; 0 means DefaultPartitions and DefaultReplication. An
	// existing topic is used as it is.
	Partitions  int32
	Replication int16

	// TLS to the brokers is on when TLS is set or any of CAFile,
	// CertFile, KeyFile, ServerName is. CAFile holds the PEM CAs the
	// brokers' certificates must chain to ("": the system's roots);
	// CertFile and KeyFile, given together, are a PEM client certificate
	// and its key, for brokers that require one (ssl.client.auth);
	// ServerName is the name the brokers' certificates must hold (""
	// means the host of each address dialed). TLS 1.2 at least.
	TLS                                   bool
	CAFile, CertFile, KeyFile, ServerName string

	// SASL is the SASL mechanism, SCRAMSHA256 or SCRAMSHA512, or ""
	// for none. It needs User and PasswordFile: a file holding the
	// password (surrounding white space, such as a final newline, is
	// not part of it), read by Opts. Over TLS it is the brokers'
	// SASL_SSL listener, without it SASL_PLAINTEXT (SCRAM sends no
	// password, but the records then cross the network in clear).
	SASL         string
	User         string
	PasswordFile string

	// RecordKeyFile, if set, holds the record key (surrounding white
	// space is not part of it): the topic's (ingest collectors and
	// writers), or an agent's own, derived from it (agents); producers
	// sign their records under their agent's key, and writers refuse
	// records not signed so (kafkarec.RecordKey). Read by RecordKey.
	RecordKeyFile string
	// PreviousRecordKeyFile, if set (writers), holds the topic's key
	// before RecordKeyFile's: records signed under it are taken too,
	// while producers move to the new key. Read by PreviousRecordKey.
	PreviousRecordKeyFile string
}

// WithDefaults returns c with every zero field that has a default set
// to it, and SASL in upper case.
func (c Config) WithDefaults() Config {
	if c.Topic == "" {
		c.Topic = DefaultTopic
	}
	if c.ClientID == "" {
		c.ClientID = DefaultClientID
	}
	if c.Partitions == 0 {
		c.Partitions = DefaultPartitions
	}
	if c.Replication == 0 {
		c.Replication = DefaultReplication
	}
	c.SASL = strings.ToUpper(c.SASL)
	return c
}

// TLSEnabled reports whether connections to the brokers use TLS.
func (c Config) TLSEnabled() bool {
	return c.TLS || c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" || c.ServerName != ""
}

// Validate checks c without touching the files it names (Opts reads
// them).
func (c Config) Validate() error {
	c = c.WithDefaults()
	if len(c.Brokers) == 0 {
		return errors.New("kafka: no broker address")
	}
	for _, b := range c.Brokers {
		if err := checkAddr(b); err != nil {
			return err
		}
	}
	if err := CheckTopic(c.Topic); err != nil {
		return err
	}
	if len(c.ClientID) > 255 || strings.IndexFunc(c.ClientID, func(r rune) bool { return r < 0x20 || r > 0x7e }) >= 0 {
		return fmt.Errorf("kafka: client id %q: want at most 255 bytes of printable ASCII", c.ClientID)
	}
	switch {
	case c.Partitions < 0:
		return fmt.Errorf("kafka: %d partitions: want at least 1", c.Partitions)
	case c.Replication < -1:
		return fmt.Errorf("kafka: replication factor %d: want at least 1, or -1 for the brokers' default", c.Replication)
	case c.KeyFile != "" && c.CertFile == "":
		return errors.New("kafka: a TLS client key without its certificate")
	case c.CertFile != "" && c.KeyFile == "":
		return errors.New("kafka: a TLS client certificate without its key")
	}
	switch c.SASL {
	case "":
		if c.User != "" || c.PasswordFile != "" {
			return errors.New("kafka: a SASL user or password file without a SASL mechanism")
		}
	case SCRAMSHA256, SCRAMSHA512:
		if c.User == "" || c.PasswordFile == "" {
			return fmt.Errorf("kafka: SASL %s needs a user and a password file", c.SASL)
		}
	default:
		return fmt.Errorf("kafka: SASL mechanism %q: want %s or %s", c.SASL, SCRAMSHA256, SCRAMSHA512)
	}
	return nil
}

// checkAddr accepts host:port with a host and a port from 1 to 65535.
func checkAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return fmt.Errorf("kafka: broker address %q: want host:port", addr)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("kafka: broker address %q: port %q is not a number from 1 to 65535", addr, port)
	}
	return nil
}

// CheckTopic applies Kafka's rules for a topic name: 1 to MaxTopicLen
// characters of [a-zA-Z0-9._-], and not "." or "..".
func CheckTopic(topic string) error {
	switch {
	case topic == "":
		return errors.New("kafka: empty topic name")
	case len(topic) > MaxTopicLen:
		return fmt.Errorf("kafka: topic name of %d characters: at most %d", len(topic), MaxTopicLen)
	case topic == "." || topic == "..":
		return fmt.Errorf("kafka: topic name %q is not allowed", topic)
	}
	for _, r := range topic {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("kafka: topic name %q holds %q: only a-z, A-Z, 0-9, '.', '_' and '-' are allowed", topic, r)
		}
	}
	return nil
}

// Opts validates c and returns the franz-go options that connect to the
// brokers as c says: seed brokers, client id, TLS, SASL. It reads the
// TLS files (a client certificate must be valid now) and the password
// file once, here; a changed file takes effect at the next Opts.
// Callers append their producing or consuming options.
func (c Config) Opts() ([]kgo.Opt, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c = c.WithDefaults()
	opts := []kgo.Opt{kgo.SeedBrokers(c.Brokers...), kgo.ClientID(c.ClientID)}
	if c.TLSEnabled() {
		cfg, err := pki.ClientConfig(c.CAFile, c.CertFile, c.KeyFile, c.ServerName)
		if err != nil {
			return nil, fmt.Errorf("kafka: %w", err)
		}
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	if c.SASL != "" {
		pass, err := readPassword(c.PasswordFile)
		if err != nil {
			return nil, err
		}
		auth := scram.Auth{User: c.User, Pass: pass}
		var m sasl.Mechanism
		if c.SASL == SCRAMSHA256 {
			m = auth.AsSha256Mechanism()
		} else {
			m = auth.AsSha512Mechanism()
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// NewClient is kgo.NewClient with c.Opts() and then extra.
func (c Config) NewClient(extra ...kgo.Opt) (*kgo.Client, error) {
	opts, err := c.Opts()
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	return cl, nil
}

func readPassword(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("kafka: SASL password file: %w", err)
	}
	pass := strings.TrimSpace(string(b))
	if pass == "" {
		return "", fmt.Errorf("kafka: %s: %w", file, ErrEmptyPassword)
	}
	return pass, nil
}

// RecordKey reads RecordKeyFile: the key without surrounding white
// space, nil when no file is set. An empty key is ErrEmptyRecordKey.
func (c Config) RecordKey() ([]byte, error) { return readKey(c.RecordKeyFile) }

// PreviousRecordKey reads PreviousRecordKeyFile as RecordKey reads
// RecordKeyFile.
func (c Config) PreviousRecordKey() ([]byte, error) { return readKey(c.PreviousRecordKeyFile) }

// readKey reads a record key file: nil for no file, ErrEmptyRecordKey
// for an empty key.
func readKey(file string) ([]byte, error) {
	if file == "" {
		return nil, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("kafka: record key file: %w", err)
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil, fmt.Errorf("kafka: %s: %w", file, ErrEmptyRecordKey)
	}
	return b, nil
}
