package main

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pcapsync/pcapsync/internal/collector"
	"github.com/pcapsync/pcapsync/internal/kafkaconn"
	"github.com/pcapsync/pcapsync/internal/liveness"
	"github.com/pcapsync/pcapsync/internal/metrics"
	"github.com/pcapsync/pcapsync/internal/queryhttp"
	"github.com/pcapsync/pcapsync/internal/redisfeed"
	"github.com/pcapsync/pcapsync/internal/serve"
	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/tap"
)

// TestCollectorFlagDefaults: every collector flag's default is its
// package's default (or the zero value, where the package's default is
// "none"), so that no default is written twice. A flag missing from the
// table fails too.
func TestCollectorFlagDefaults(t *testing.T) {
	itoa := func(n int64) string { return strconv.FormatInt(n, 10) }
	want := map[string]string{
		"listen":               serve.DefaultListen,
		"listen-udp":           "",
		"dir":                  "",
		"rotate-size":          itoa(store.DefaultRotateSize),
		"rotate-interval":      store.DefaultRotateInterval.String(),
		"file-compress":        "none",
		"file-zstd-frames":     store.ZstdFramePerFile.String(),
		"fsync":                store.DefaultFsync.String(),
		"idle-close":           store.DefaultIdleClose.String(),
		"max-open-files":       "0", // store.DefaultMaxOpenFiles of RLIMIT_NOFILE, computed at Open
		"index-block":          itoa(store.DefaultIndexBlock),
		"flows":                strconv.FormatBool(store.DefaultFlows),
		"retain-free":          strconv.Itoa(store.DefaultRetainFreePercent) + "%",
		"retain-size":          "0",
		"retain-age":           "0s",
		"retain-agent-size":    "0",
		"max-frame":            itoa(collector.DefaultMaxFrame),
		"udp-reassembly-mem":   itoa(collector.DefaultUDPReassemblyBytes),
		"read-memory":          itoa(collector.DefaultReadMemory),
		"handshake-timeout":    collector.DefaultHandshakeTimeout.String(),
		"shutdown-timeout":     collector.DefaultShutdownTimeout.String(),
		"tls-cert":             "",
		"tls-key":              "",
		"tls-client-ca":        "",
		"token-file":           "",
		"insecure":             "false",
		"max-conns":            "0", // derived from RLIMIT_NOFILE by serve (frontdoor.Budget)
		"max-conns-per-source": "0", // a quarter of max-conns
		"tap-max-conns":        "0", // derived, at most tap.DefaultMaxConns
		"query-max-conns":      "0", // derived, at most queryhttp.DefaultMaxConns
		"metrics-max-conns":    "0", // derived, at most metrics.DefaultMaxConns
		"heartbeat":            liveness.DefaultHeartbeat.String(),
		"peer-timeout":         liveness.DefaultPeerTimeout.String(),
		"metrics":              "",
		"pprof":                "false",
		"metrics-max-agents":   strconv.Itoa(metrics.DefaultMaxAgents),
		"tap":                  "",
		"tap-queue":            strconv.Itoa(tap.DefaultQueueSize),
		"query-listen":         "",
		"console-listen":       "",
		"console-max-conns":    "0", // derived, at most queryhttp.DefaultMaxConns
		"query-max":            strconv.Itoa(queryhttp.DefaultMaxQueries),
		"redis":                "",
		"redis-prefix":         redisfeed.DefaultPrefix,
		"redis-compress":       redisfeed.DefaultCompress.String(),
		"redis-maxlen":         itoa(redisfeed.DefaultMaxLen),
		"redis-max-age":        "0s",
		"redis-queue":          itoa(redisfeed.DefaultQueueBytes),
		"redis-timeout":        redisfeed.DefaultTimeout.String(),
	}
	maps.Copy(want, kafkaFlagDefaults)
	fs := pflag.NewFlagSet("collector", pflag.ContinueOnError)
	var cfg serve.Config
	collectorFlags(fs, &cfg)
	checkFlagDefaults(t, fs, want)
}

// kafkaFlagDefaults are the defaults of kafkaFlagsOn's flags.
var kafkaFlagDefaults = map[string]string{
	"kafka":                 "",
	"kafka-topic":           kafkaconn.DefaultTopic,
	"kafka-partitions":      strconv.Itoa(int(kafkaconn.DefaultPartitions)),
	"kafka-replication":     strconv.Itoa(int(kafkaconn.DefaultReplication)),
	"kafka-tls":             "false",
	"kafka-tls-ca":          "",
	"kafka-tls-cert":        "",
	"kafka-tls-key":         "",
	"kafka-tls-server-name": "",
	"kafka-sasl":            "",
	"kafka-user":            "",
	"kafka-password-file":   "",
	"kafka-record-key":      "",
}

// TestWriterFlagDefaults: the writer's flags are the collector's store,
// retention, metrics and feed flags, Kafka's, and --group.
func TestWriterFlagDefaults(t *testing.T) {
	cfs := pflag.NewFlagSet("collector", pflag.ContinueOnError)
	var ccfg serve.Config
	collectorFlags(cfs, &ccfg)
	want := map[string]string{"group": "pcapsync-writers", "kafka-record-key-previous": ""}
	cfs.VisitAll(func(f *pflag.Flag) { want[f.Name] = f.DefValue }) // the security flags too: for --query-listen and --tap
	for _, agentsOnly := range []string{"listen", "listen-udp", "max-frame", "udp-reassembly-mem", "read-memory", "handshake-timeout",
		"shutdown-timeout", "max-conns", "max-conns-per-source", "heartbeat", "peer-timeout"} {
		delete(want, agentsOnly)
	}
	fs := pflag.NewFlagSet("writer", pflag.ContinueOnError)
	var cfg serve.Config
	writerFlags(fs, &cfg)
	checkFlagDefaults(t, fs, want)
	if !cfg.Collector.Store.Shared {
		t.Errorf("a writer's store is not shared: writers of one group share --dir")
	}
}

// TestCollectorFlagsGivenOnly: the flags not given leave the package
// Configs at their zero values (the defaults), and a flag's 0 disables
// rotation.
func TestCollectorFlagsGivenOnly(t *testing.T) {
	fs := pflag.NewFlagSet("collector", pflag.ContinueOnError)
	var cfg serve.Config
	given := collectorFlags(fs, &cfg)
	if err := fs.Parse([]string{"--redis", "redis://x", "--redis-maxlen", "5", "--rotate-size", "0", "--fsync", "batch"}); err != nil {
		t.Fatal(err)
	}
	given.apply(fs)
	r, st := cfg.Redis, cfg.Collector.Store
	switch {
	case r.MaxLen != 5 || r.Prefix != "" || r.Compress != nil || r.QueueBytes != 0 || r.Timeout != 0:
		t.Errorf("redis config %+v: want only URL and MaxLen set", r)
	case cfg.Tap.QueueSize != 0:
		t.Errorf("tap queue %d without --tap-queue", cfg.Tap.QueueSize)
	case st.RotateSize != -1 || st.RotateInterval != 0:
		t.Errorf("rotate size %d, interval %s: want -1 (disabled) and 0 (default)", st.RotateSize, st.RotateInterval)
	case st.Fsync != store.FsyncPerBatch:
		t.Errorf("fsync %s, want FsyncPerBatch", st.Fsync)
	case st.Retain != store.RetainConfig{}:
		t.Errorf("retention %+v without a --retain flag: want the zero value (the defaults)", st.Retain)
	}
}

// TestRetainFreeFlag: --retain-free takes a percentage or a size, and 0
// (either way) turns the rule off.
func TestRetainFreeFlag(t *testing.T) {
	tests := []struct {
		in    string
		pct   float64
		bytes int64
		ok    bool
	}{
		{"10%", 10, 0, true},
		{"2.5%", 2.5, 0, true},
		{"20G", 0, 20 << 30, true},
		{"0", -1, -1, true},
		{"0%", -1, -1, true},
		{"95%", 0, 0, false},
		{"-1%", 0, 0, false},
		{"lots", 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			var rc store.RetainConfig
			err := retainFreeFlag{&rc}.Set(tt.in)
			if (err == nil) != tt.ok {
				t.Fatalf("Set(%q) = %v, want ok %v", tt.in, err, tt.ok)
			}
			if tt.ok && (rc.FreePercent != tt.pct || rc.FreeBytes != tt.bytes) {
				t.Errorf("Set(%q): %g%%, %d bytes; want %g%%, %d", tt.in, rc.FreePercent, rc.FreeBytes, tt.pct, tt.bytes)
			}
			if tt.ok && tt.pct < 0 && !rc.Off() {
				t.Errorf("Set(%q) left retention on", tt.in)
			}
		})
	}
}

// TestGivenOnlyPrecedence runs the collector's flags through
// applySettings: a given-only field takes the value of its flag when
// the flag was given on the command line, in the environment or in the
// configuration file (the command line first, the file last), its
// default's value too when given, and stays zero (the package's
// default) when given nowhere.
func TestGivenOnlyPrecedence(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "collector.conf")
	if err := os.WriteFile(conf, []byte("redis-maxlen = 7\nredis-prefix = file:\ntap-queue = 1M\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	maxLen := strconv.FormatInt(redisfeed.DefaultMaxLen, 10)
	for _, tc := range []struct {
		name   string
		env    map[string]string
		args   []string
		maxLen int64
		prefix string
		queue  int
	}{
		{"given nowhere", nil, nil, 0, "", 0},
		{"file", nil, []string{"--config", conf}, 7, "file:", 1 << 20},
		{"flag over file", nil, []string{"--config", conf, "--redis-maxlen", "9"}, 9, "file:", 1 << 20},
		{"environment over file", map[string]string{"PCAPSYNC_REDIS_PREFIX": "env:"}, []string{"--config", conf}, 7, "env:", 1 << 20},
		{"flag over environment", map[string]string{"PCAPSYNC_REDIS_PREFIX": "env:"}, []string{"--redis-prefix", "flag:"}, 0, "flag:", 0},
		{"default value given", nil, []string{"--redis-maxlen", maxLen}, redisfeed.DefaultMaxLen, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cfg serve.Config
			root := &cobra.Command{Use: "p", SilenceErrors: true, SilenceUsage: true}
			root.PersistentFlags().String("config", "", "")
			root.PersistentPreRunE = func(c *cobra.Command, args []string) error { return applySettings(c, args, tc.env) }
			root.AddCommand(leaf("collector", "", "", noArgs, func(fs *pflag.FlagSet) runFunc {
				given := collectorFlags(fs, &cfg)
				return func(context.Context, []string) error { given.apply(fs); return nil }
			}))
			root.SetArgs(append([]string{"collector"}, tc.args...))
			if err := root.Execute(); err != nil {
				t.Fatal(err)
			}
			if r := cfg.Redis; r.MaxLen != tc.maxLen || r.Prefix != tc.prefix || cfg.Tap.QueueSize != tc.queue || r.Timeout != 0 {
				t.Errorf("redis maxlen %d, prefix %q, timeout %s, tap queue %d; want %d, %q, 0s, %d",
					r.MaxLen, r.Prefix, r.Timeout, cfg.Tap.QueueSize, tc.maxLen, tc.prefix, tc.queue)
			}
		})
	}
}
