package serve

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"

	"github.com/pcapsync/pcapsync/internal/fielderr"

	"github.com/pcapsync/pcapsync/internal/collector"
	"github.com/pcapsync/pcapsync/internal/kafkaconn"
	"github.com/pcapsync/pcapsync/internal/metrics"
	"github.com/pcapsync/pcapsync/internal/queryhttp"
	"github.com/pcapsync/pcapsync/internal/redisfeed"
	"github.com/pcapsync/pcapsync/internal/tap"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// Role is what a collector process does; cmd/pcapsync chooses it from
// the command and its flags (collector: RoleCollector, or RoleIngest
// with --kafka; writer: RoleWriter), and New assembles the parts of
// that role only.
type Role int

const (
	// RoleCollector takes agents (TCP, and UDP with ListenUDP) and
	// writes their batches into Collector.Store.Dir. The zero Role.
	RoleCollector Role = iota
	// RoleIngest takes agents over TCP and produces every batch to
	// Kafka (Kafka.Topic, created when absent), acknowledging it once
	// Kafka did; it keeps nothing on disk (Collector.Store.Dir empty).
	RoleIngest
	// RoleWriter takes no agents: it consumes the records of
	// Kafka.Topic as a member of Group and writes them into
	// Collector.Store.Dir, shared with the group's other writers.
	RoleWriter
)

// String returns the role's name, as its command says it.
func (r Role) String() string {
	switch r {
	case RoleCollector:
		return "collector"
	case RoleIngest:
		return "ingest collector"
	case RoleWriter:
		return "writer"
	}
	return fmt.Sprintf("Role(%d)", int(r))
}

// takesAgents reports a role with the agents' listeners.
func (r Role) takesAgents() bool { return r != RoleWriter }

// writesFiles reports a role with a store.
func (r Role) writesFiles() bool { return r != RoleIngest }

// Config configures a collector process. The zero value of every field
// but Collector.Store.Dir, and the transport security (TLS or
// Insecure), means its default.
type Config struct {
	// Role is what the process does: it says which of the fields below
	// apply (Kafka and Group are the Kafka roles').
	Role Role
	// Collector is the core's and the intakes' configuration, the
	// store's (Collector.Store) included. Its Feed is set by New (the
	// tap and the Redis feed), and its TLS from TLSCertFile and
	// TLSKeyFile when those are given; its Logger defaults to Logger.
	Collector collector.Config
	// Listen is the TCP address agents connect to. "" means
	// DefaultListen.
	Listen string
	// ListenUDP, if set, is the UDP address agents of the UDP transport
	// send to, beside TCP. UDP is plaintext: it needs
	// Collector.Insecure (with TLS, TCP keeps TLS and Insecure admits
	// only UDP).
	ListenUDP string

	// TLSCertFile and TLSKeyFile (PEM), if set, are the collector's
	// certificate (with its chain) and key: New loads them into
	// Collector.TLS (see pki.ServerConfig). TLSClientCAFile, if set,
	// requires and verifies client certificates signed by these CAs.
	TLSCertFile, TLSKeyFile, TLSClientCAFile string
	// TokenFile, if set, holds the shared token every hello must carry
	// (surrounding white space ignored): New reads it into
	// Collector.Token.
	TokenFile string

	// Tap serves live pcapng streams when Tap.Listen is not empty; its
	// TLS, Token and Logger are the collector's.
	Tap tap.Config
	// Redis publishes every written batch when Redis.URL is set; its
	// Logger is Logger.
	Redis redisfeed.Config
	// Metrics serves Prometheus metrics and the status page when
	// Metrics.Addr is set.
	Metrics metrics.Config
	// Query serves pcapsync query over HTTPS when Query.Listen is set;
	// its Dir is Collector.Store.Dir, its TLS, Token and Logger the
	// collector's.
	Query queryhttp.Config
	// Console serves the browser console (internal/console) when
	// Console.Listen is set: its front door is a query listener's
	// (queryhttp.Config.Handler; the same TLS, client certificates and
	// plain-HTTP rules), its Dir Collector.Store.Dir, its login token
	// the collector's. Only Listen and MaxConns are read.
	Console queryhttp.Config

	// Kafka connects RoleIngest and RoleWriter to the brokers
	// (docs/scale-out.md); Group is RoleWriter's consumer group.
	Kafka kafkaconn.Config
	Group string

	// Logger receives events. nil means slog.Default().
	Logger *slog.Logger

	// BeforeStore, if set, is called by New once the files the Config
	// names are read and every listener is bound, before the store
	// opens (and its repair starts in the background): the collector's
	// --user switches to the user there, so that every file of the
	// output root is created by the user. An error fails New.
	BeforeStore func() error
}

// DefaultListen is the TCP address of Config.Listen's zero value: the
// loopback interface, wire.DefaultPort.
var DefaultListen = net.JoinHostPort("127.0.0.1", strconv.Itoa(wire.DefaultPort))

// Validate reports the first unusable setting, naming its field
// (fielderr, "Tap.QueueSize"; cmd/pcapsync shows the flag): the
// rules across parts here, then each enabled part's Validate. Every
// error wraps ErrConfig.
func (c *Config) Validate() error {
	if err := c.validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

func (c *Config) validate() error {
	if err := c.validateRole(); err != nil {
		return err
	}
	if err := c.validateKafka(); err != nil {
		return err
	}
	if c.Writer() {
		if err := c.validateWriterSecurity(); err != nil {
			return err
		}
		return c.validateParts()
	}
	tls := c.Collector.TLS != nil || c.TLSCertFile != "" || c.TLSKeyFile != ""
	insecure := c.Collector.Insecure
	switch {
	case c.ListenUDP != "" && !insecure:
		return fielderr.Errorf("{serve.ListenUDP}: UDP is plaintext (no DTLS): add {serve.Collector.Insecure} (with {serve.TLSCertFile}, TCP keeps TLS and {serve.Collector.Insecure} admits only UDP; {serve.TokenFile} still applies)")
	case !tls && !insecure:
		return fielderr.Errorf("no transport security chosen: give {serve.TLSCertFile} FILE and {serve.TLSKeyFile} FILE (with {serve.TLSClientCAFile} FILE to require agent certificates, or {serve.TokenFile} FILE), or {serve.Collector.Insecure} for plain TCP")
	case tls && insecure && c.ListenUDP == "":
		return fielderr.Errorf("{serve.Collector.Insecure} and {serve.TLSCertFile}/{serve.TLSKeyFile} exclude each other (except with {serve.ListenUDP}: TCP keeps TLS, {serve.Collector.Insecure} admits the plaintext UDP listener)")
	case c.TLSClientCAFile != "" && (c.TLSCertFile == "" || c.TLSKeyFile == ""):
		return fielderr.Errorf("{serve.TLSClientCAFile} needs {serve.TLSCertFile} and {serve.TLSKeyFile}")
	case c.TLSCertFile != "" && c.Collector.TLS != nil:
		return errors.New("a TLS configuration and certificate files exclude each other")
	case c.TokenFile != "" && c.Collector.Token != "":
		return errors.New("a token and a token file exclude each other")
	}
	return c.validateParts()
}

// validateParts validates each enabled part.
func (c *Config) validateParts() error {
	if err := c.needs(); err != nil {
		return err
	}
	cc := c.Collector
	if c.Ingest() {
		cc.Sink = pendingSink{} // New sets the producer
	}
	if err := cc.Validate(); err != nil {
		return err
	}
	if len(c.Tap.Listen) > 0 {
		if err := c.Tap.Validate(); err != nil {
			return err
		}
	}
	if c.Redis.URL != "" {
		if err := c.Redis.Validate(); err != nil {
			return err
		}
	}
	if c.Query.Listen != "" {
		qc := c.Query
		qc.Dir = c.Collector.Store.Dir
		if err := qc.Validate(); err != nil {
			return err
		}
	}
	if c.Console.Listen != "" {
		if _, _, err := net.SplitHostPort(c.Console.Listen); err != nil {
			return fielderr.Errorf("console listener %q: want HOST:PORT ({serve.Console.Listen}): %w", c.Console.Listen, err)
		}
		if c.Console.MaxConns < 0 {
			return fielderr.Errorf("console listener: max conns %d is negative ({serve.Console.MaxConns})", c.Console.MaxConns)
		}
	}
	return c.Metrics.Validate()
}

// validateWriterSecurity checks a writer's TLS and token settings: they
// serve its query listener and taps, and a query listener needs them or
// Insecure, as a collector's agents' port does.
func (c *Config) validateWriterSecurity() error {
	tls := c.Collector.TLS != nil || c.TLSCertFile != "" || c.TLSKeyFile != ""
	insecure := c.Collector.Insecure
	serves := c.Query.Listen != "" || c.Console.Listen != "" || len(c.Tap.Listen) > 0
	switch {
	case (tls || insecure || c.TokenFile != "" || c.Collector.Token != "") && !serves:
		return fielderr.Errorf("{serve.TLSCertFile}, {serve.TokenFile} and {serve.Collector.Insecure} of a writer are for {serve.Query.Listen}, {serve.Console.Listen} and {serve.Tap.Listen}: give one of those, or drop them")
	case (c.Query.Listen != "" || c.Console.Listen != "") && !tls && !insecure:
		which := "{serve.Query.Listen}"
		if c.Query.Listen == "" {
			which = "{serve.Console.Listen}"
		}
		return fielderr.Errorf(which + ": no transport security chosen: give {serve.TLSCertFile} FILE and {serve.TLSKeyFile} FILE (with {serve.TLSClientCAFile} FILE to require client certificates, or {serve.TokenFile} FILE), or {serve.Collector.Insecure} for plain HTTP")
	case tls && insecure:
		return fielderr.Errorf("{serve.Collector.Insecure} and {serve.TLSCertFile}/{serve.TLSKeyFile} exclude each other")
	case c.TLSClientCAFile != "" && (c.TLSCertFile == "" || c.TLSKeyFile == ""):
		return fielderr.Errorf("{serve.TLSClientCAFile} needs {serve.TLSCertFile} and {serve.TLSKeyFile}")
	}
	return nil
}

// needs refuses a setting of a part that is not enabled: it would do
// nothing.
func (c *Config) needs() error {
	t, r := &c.Tap, &c.Redis
	tapOn, redisOn, queryOn, metricsOn := len(t.Listen) > 0, r.URL != "", c.Query.Listen != "", c.Metrics.Addr != ""
	for _, x := range []struct {
		set, enabled bool
		msg          string // names the setting and the one it needs
	}{
		{t.QueueSize != 0, tapOn, "{serve.Tap.QueueSize} needs {serve.Tap.Listen}"},
		{c.Query.MaxQueries != 0, queryOn, "{serve.Query.MaxQueries} needs {serve.Query.Listen}"},
		{c.Query.MaxConns != 0, queryOn, "{serve.Query.MaxConns} needs {serve.Query.Listen}"},
		{c.Console.MaxConns != 0, c.Console.Listen != "", "{serve.Console.MaxConns} needs {serve.Console.Listen}"},
		{t.MaxConns != 0, tapOn, "{serve.Tap.MaxConns} needs {serve.Tap.Listen}"},
		{c.Metrics.MaxConns != 0, metricsOn, "{serve.Metrics.MaxConns} needs {serve.Metrics.Addr}"},
		{r.Prefix != "", redisOn, "{serve.Redis.Prefix} needs {serve.Redis.URL}"},
		{r.Compress != nil, redisOn, "{serve.Redis.Compress} needs {serve.Redis.URL}"},
		{r.MaxLen != 0, redisOn, "{serve.Redis.MaxLen} needs {serve.Redis.URL}"},
		{r.MaxAge != 0, redisOn, "{serve.Redis.MaxAge} needs {serve.Redis.URL}"},
		{r.QueueBytes != 0, redisOn, "{serve.Redis.QueueBytes} needs {serve.Redis.URL}"},
		{r.Timeout != 0, redisOn, "{serve.Redis.Timeout} needs {serve.Redis.URL}"},
	} {
		if x.set && !x.enabled {
			return fielderr.Errorf(x.msg)
		}
	}
	return nil
}

// Ingest reports an ingest collector (RoleIngest): agents in, Kafka out.
func (c *Config) Ingest() bool { return c.Role == RoleIngest }

// Writer reports a writer (RoleWriter): Kafka in, files out.
func (c *Config) Writer() bool { return c.Role == RoleWriter }

// validateRole checks that the Kafka settings are those of the role:
// brokers for both Kafka roles and for them only, a group for a writer
// only.
func (c *Config) validateRole() error {
	kafka, group := len(c.Kafka.Brokers) > 0, c.Group != ""
	switch {
	case c.Role < RoleCollector || c.Role > RoleWriter:
		return fmt.Errorf("role: %s is not one", c.Role)
	case c.Role == RoleCollector && kafka:
		return errors.New("role collector: Kafka.Brokers set, but a collector writes its own files (RoleIngest produces to Kafka, RoleWriter consumes)")
	case c.Role != RoleCollector && !kafka:
		return fmt.Errorf("role %s: Kafka.Brokers required", c.Role)
	case c.Role == RoleWriter && !group:
		return errors.New("role writer: Group required")
	case c.Role == RoleIngest && group:
		return errors.New("role ingest collector: Group is a writer's consumer group")
	}
	return nil
}

// validateKafka checks the settings of the Kafka roles.
func (c *Config) validateKafka() error {
	if len(c.Kafka.Brokers) == 0 {
		if c.Group != "" {
			return fielderr.Errorf("{serve.Group} needs {serve.Kafka.Brokers}")
		}
		return nil
	}
	if err := c.Kafka.Validate(); err != nil {
		return err
	}
	switch {
	case c.Ingest() && c.Collector.Store.Dir != "":
		return fielderr.Errorf("{serve.Collector.Store.Dir}: a collector with {serve.Kafka.Brokers} writes no files (the writers do, `pcapsync writer`): drop {serve.Collector.Store.Dir}")
	case c.Ingest() && (len(c.Tap.Listen) > 0 || c.Redis.URL != "" || c.Query.Listen != "" || c.Console.Listen != ""):
		return fielderr.Errorf("{serve.Tap.Listen}, {serve.Redis.URL}, {serve.Query.Listen} and {serve.Console.Listen} show what is written: with {serve.Kafka.Brokers} this collector writes nothing; give them to the writers")
	case c.Ingest() && c.ListenUDP != "":
		return fielderr.Errorf("{serve.ListenUDP}: a collector with {serve.Kafka.Brokers} takes agents over TCP only (UDP has no acknowledgement to wait for Kafka's)")
	}
	return nil
}

// pendingSink stands for the Kafka producer an ingest collector's
// Config gets in New, so that Validate checks it as one. Never called.
type pendingSink struct{ collector.Sink }
