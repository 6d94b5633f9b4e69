package main

import (
	"errors"

	"github.com/pcapsync/pcapsync/internal/fielderr"
)

// fieldFlags names, for every Config field a library's error can name
// (fielderr keys, "pkg.Path"), the flag that sets it, as the user reads
// it in this program's messages. TestFieldFlags keeps it complete: every
// key a library's source names is here, and every flag here is one a
// command defines.
var fieldFlags = map[string]string{
	"agent.BatchBytes":                   "--batch-size",
	"agent.BlockSize":                    "--block-size",
	"agent.Checksum":                     "--checksum",
	"agent.Collectors":                   "--collector",
	"agent.Compress":                     "--compress",
	"agent.Heartbeat":                    "--heartbeat",
	"agent.Insecure":                     "--insecure",
	"agent.Interfaces":                   "--iface",
	"agent.Kafka":                        "--kafka",
	"agent.Kafka.CertFile":               "--kafka-tls-cert",
	"agent.Kafka.SASL":                   "--kafka-sasl",
	"agent.Kafka.TLS":                    "--kafka-tls",
	"agent.MTU":                          "--mtu",
	"agent.MaxRate":                      "--max-rate",
	"agent.Name":                         "--name",
	"agent.PeerTimeout":                  "--peer-timeout",
	"agent.QueueBytes":                   "--queue-size",
	"agent.ReadFile":                     "--read",
	"agent.RingSize":                     "--ring-size",
	"agent.RingTime":                     "--ring-time",
	"agent.SnapLen":                      "--snaplen",
	"agent.Spool":                        "--spool",
	"agent.SpoolBytes":                   "--spool-size",
	"agent.TLS":                          "the --tls flags",
	"agent.Token":                        "--token-file",
	"agent.Transport":                    "--transport",
	"agentproc.User":                     "--user",
	"collector.Insecure":                 "--insecure",
	"correlate.Agents":                   "--agent",
	"federate.Count":                     "--count",
	"federate.MaxBytes":                  "--max-bytes",
	"federate.Servers":                   "--from",
	"federate.Timeout":                   "--server-timeout",
	"metrics.Addr":                       "--metrics",
	"metrics.MaxAgents":                  "--metrics-max-agents",
	"metrics.MaxConns":                   "--metrics-max-conns",
	"metrics.Pprof":                      "--pprof",
	"query.Dir":                          "--dir",
	"queryhttp.Dir":                      "--dir",
	"queryhttp.Listen":                   "--query-listen",
	"queryhttp.MaxConns":                 "--query-max-conns",
	"queryhttp.MaxQueries":               "--query-max",
	"redisfeed.CopyConfig.Agent":         "--agent",
	"redisfeed.CopyConfig.Count":         "--count",
	"redisfeed.CopyConfig.Filter":        "--filter",
	"redisfeed.CopyConfig.From":          "--from",
	"redisfeed.CopyConfig.Idle":          "--until-idle",
	"redisfeed.CopyConfig.URL":           "--redis",
	"redisfeed.MaxAge":                   "--redis-max-age",
	"redisfeed.MaxLen":                   "--redis-maxlen",
	"serve.Collector.Insecure":           "--insecure",
	"serve.Console.Listen":               "--console-listen",
	"serve.Console.MaxConns":             "--console-max-conns",
	"serve.Collector.MaxConns":           "--max-conns",
	"serve.Collector.Store.MaxOpenFiles": "--max-open-files",
	"serve.Collector.Store.Dir":          "--dir",
	"serve.Group":                        "--group",
	"serve.Kafka.Brokers":                "--kafka",
	"serve.ListenUDP":                    "--listen-udp",
	"serve.Metrics.Addr":                 "--metrics",
	"serve.Metrics.MaxConns":             "--metrics-max-conns",
	"serve.Query.Listen":                 "--query-listen",
	"serve.Query.MaxConns":               "--query-max-conns",
	"serve.Query.MaxQueries":             "--query-max",
	"serve.Redis.Compress":               "--redis-compress",
	"serve.Redis.MaxAge":                 "--redis-max-age",
	"serve.Redis.MaxLen":                 "--redis-maxlen",
	"serve.Redis.Prefix":                 "--redis-prefix",
	"serve.Redis.QueueBytes":             "--redis-queue",
	"serve.Redis.Timeout":                "--redis-timeout",
	"serve.Redis.URL":                    "--redis",
	"serve.TLSCertFile":                  "--tls-cert",
	"serve.TLSClientCAFile":              "--tls-client-ca",
	"serve.TLSKeyFile":                   "--tls-key",
	"serve.Tap.Listen":                   "--tap",
	"serve.Tap.MaxConns":                 "--tap-max-conns",
	"serve.Tap.QueueSize":                "--tap-queue",
	"serve.TokenFile":                    "--token-file",
	"tap.Listen":                         "--tap",
	"tap.MaxConns":                       "--tap-max-conns",
	"tap.QueueSize":                      "--tap-queue",
}

// flagError is an error whose text names flags where the libraries'
// errors name Config fields; it wraps the error it renders.
type flagError struct {
	text string
	err  error
}

func (e *flagError) Error() string { return e.text }
func (e *flagError) Unwrap() error { return e.err }

// withFlagNames returns err with the fields its libraries' errors name
// shown as their flags (fieldFlags); err itself if it names none.
func withFlagNames(err error) error {
	var fe *fielderr.Error
	if !errors.As(err, &fe) {
		return err
	}
	return &flagError{fielderr.Render(err, func(key string) string { return fieldFlags[key] }), err}
}
