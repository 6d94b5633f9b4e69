package main

import (
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/pcapsync/pcapsync/internal/agent"
	"github.com/pcapsync/pcapsync/internal/liveness"
)

// TestAgentFlagDefaults: every agent flag's default is the agent
// package's default for its field (or the zero value, where the
// package's default is "none" or is worked out at start), so that no
// default is written twice. A flag missing from the table fails too.
func TestAgentFlagDefaults(t *testing.T) {
	want := map[string]string{
		"collector":        "",
		"name":             "",
		"iface":            "",
		"read":             "",
		"filter":           "",
		"snaplen":          strconv.Itoa(agent.DefaultSnapLen),
		"no-promisc":       "false",
		"max-rate":         "0",
		"ring-size":        "0",
		"buffer-size":      "0",
		"ring-time":        agent.DefaultRingTime.String(),
		"block-size":       strconv.Itoa(agent.DefaultBlockSize),
		"batch-size":       strconv.Itoa(agent.DefaultBatchBytes),
		"compress":         (&agent.Config{}).Compress.String(),
		"checksum":         agent.DefaultChecksum.String(),
		"flush-interval":   agent.DefaultFlushInterval.String(),
		"queue-size":       strconv.Itoa(agent.DefaultQueueBytes),
		"spool":            "",
		"spool-size":       strconv.Itoa(agent.DefaultSpoolBytes),
		"stats-interval":   agent.DefaultStatsInterval.String(),
		"shutdown-timeout": agent.DefaultShutdownTimeout.String(),
		"tls":              "false",
		"tls-ca":           "",
		"tls-cert":         "",
		"tls-key":          "",
		"tls-server-name":  "",
		"token-file":       "",
		"insecure":         "false",
		"transport":        agent.DefaultTransport,
		"mtu":              strconv.Itoa(agent.DefaultMTU),
		"heartbeat":        liveness.DefaultHeartbeat.String(),
		"peer-timeout":     liveness.DefaultPeerTimeout.String(),
		"user":             "",
	}
	maps.Copy(want, kafkaFlagDefaults)
	fs := pflag.NewFlagSet("agent", pflag.ContinueOnError)
	var cfg agent.Config
	agentFlags(fs, &cfg)
	checkFlagDefaults(t, fs, want)
}

// checkFlagDefaults fails t for every flag of fs whose default is not
// want's, and for every flag one of them lacks.
func checkFlagDefaults(t *testing.T, fs *pflag.FlagSet, want map[string]string) {
	t.Helper()
	seen := map[string]bool{}
	fs.VisitAll(func(f *pflag.Flag) {
		seen[f.Name] = true
		w, ok := want[f.Name]
		switch {
		case !ok:
			t.Errorf("--%s (default %q) has no row here: add its package default", f.Name, f.DefValue)
		case f.DefValue != w:
			t.Errorf("--%s defaults to %q, its package to %q", f.Name, f.DefValue, w)
		}
	})
	for name := range want {
		if !seen[name] {
			t.Errorf("the table lists --%s, which the %s does not define", name, fs.Name())
		}
	}
}

// TestAgentCollectorList: --collector takes one address or several,
// comma-separated, into Config.Collectors in their order.
func TestAgentCollectorList(t *testing.T) {
	for _, tc := range []struct {
		arg  string
		want []string
	}{
		{"coll", []string{"coll"}},
		{"a:1,b,[::1]:3", []string{"a:1", "b", "[::1]:3"}},
	} {
		fs := pflag.NewFlagSet("agent", pflag.ContinueOnError)
		var cfg agent.Config
		f := agentFlags(fs, &cfg)
		if err := fs.Parse([]string{"--collector", tc.arg, "--insecure", "-r", "x.pcap"}); err != nil {
			t.Fatal(err)
		}
		if err := f.apply(fs, &cfg, slog.New(slog.DiscardHandler)); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(cfg.Collectors, tc.want) {
			t.Errorf("--collector %s: %q, want %q", tc.arg, cfg.Collectors, tc.want)
		}
		if err := cfg.Validate(); err != nil {
			t.Errorf("--collector %s: %v", tc.arg, err)
		}
	}
}

// TestAgentKafkaFlags: --kafka sets Config.Kafka; the other --kafka
// flags need it, and the flags of a collector connection are refused
// with it (by the flags or by Config.Validate), each with a message
// naming what is wrong.
func TestAgentKafkaFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in the error; "" for none
	}{
		{[]string{"--kafka", "k1:9092,k2:9092", "--kafka-topic", "pcap"}, ""},
		{[]string{"--kafka-topic", "pcap", "--insecure", "--collector", "c"}, "--kafka-topic needs --kafka"},
		{[]string{"--kafka", "k1:9092", "--collector", "c"}, "exclude each other"},
		{[]string{"--kafka", "k1:9092", "--transport", "udp"}, "does not apply"},
		{[]string{"--kafka", "k1:9092", "--insecure"}, "--kafka-tls"},
		{[]string{"--kafka", "k1:9092", "--heartbeat", "1s"}, "with --kafka there is none"},
		{[]string{"--kafka", "k1"}, "want host:port"},
	} {
		fs := pflag.NewFlagSet("agent", pflag.ContinueOnError)
		var cfg agent.Config
		f := agentFlags(fs, &cfg)
		if err := fs.Parse(append(tc.args, "-r", "x.pcap")); err != nil {
			t.Fatal(err)
		}
		err := f.apply(fs, &cfg, slog.New(slog.DiscardHandler))
		if err == nil {
			err = withFlagNames(cfg.Validate()) // as the command shows it
		}
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v", tc.args, err)
		case tc.want == "" && (cfg.Kafka == nil || len(cfg.Kafka.Brokers) != 2 || cfg.Kafka.Topic != "pcap"):
			t.Errorf("%q: Config.Kafka %+v", tc.args, cfg.Kafka)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}
