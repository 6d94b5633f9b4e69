package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pcapsync/pcapsync/internal/kafkaconn"
	"github.com/pcapsync/pcapsync/internal/metrics"
	"github.com/pcapsync/pcapsync/internal/serve"
	"github.com/pcapsync/pcapsync/internal/store"
)

// kafkaFlagsOn defines the flags that connect to Kafka (docs/kafka.md).
func kafkaFlagsOn(fs *pflag.FlagSet, k *kafkaconn.Config, role string) {
	fs.Func("kafka", "`BROKERS`: "+role+" (comma-separated HOST:PORT list of bootstrap brokers)", func(s string) error {
		for _, b := range strings.Split(s, ",") {
			if b = strings.TrimSpace(b); b != "" {
				k.Brokers = append(k.Brokers, b)
			}
		}
		return nil
	})
	fs.StringVar(&k.Topic, "kafka-topic", kafkaconn.DefaultTopic, "with --kafka: the topic of the records (created when absent)")
	fs.Int32Var(&k.Partitions, "kafka-partitions", kafkaconn.DefaultPartitions, "with --kafka: partitions of the topic when it is created (an agent's records stay in one; do not add partitions to a topic in use)")
	fs.Int16Var(&k.Replication, "kafka-replication", kafkaconn.DefaultReplication, "with --kafka: replication factor of the topic when it is created; -1: the brokers' default")
	fs.BoolVar(&k.TLS, "kafka-tls", false, "with --kafka: speak TLS to the brokers (implied by the other --kafka-tls-* flags; the system's CAs unless --kafka-tls-ca)")
	fs.StringVar(&k.CAFile, "kafka-tls-ca", "", "with --kafka: trust the brokers' certificates signed by these CAs (PEM)")
	fs.StringVar(&k.CertFile, "kafka-tls-cert", "", "with --kafka: client certificate for the brokers (PEM)")
	fs.StringVar(&k.KeyFile, "kafka-tls-key", "", "with --kafka: the key of --kafka-tls-cert (PEM)")
	fs.StringVar(&k.ServerName, "kafka-tls-server-name", "", "with --kafka: the name the brokers' certificates must carry (default: each broker's host)")
	fs.StringVar(&k.SASL, "kafka-sasl", "", "with --kafka: SASL mechanism: SCRAM-SHA-256 or SCRAM-SHA-512 (needs --kafka-user and --kafka-password-file)")
	fs.StringVar(&k.User, "kafka-user", "", "with --kafka-sasl: the user name")
	fs.StringVar(&k.PasswordFile, "kafka-password-file", "", "with --kafka-sasl: a file holding the password (surrounding white space ignored)")
	fs.StringVar(&k.RecordKeyFile, "kafka-record-key", "", "with --kafka: a file holding the topic's record key (ingest collectors and writers: at least 16 bytes, surrounding white space ignored) or an agent's own key derived from it (agents: pcapsync gen kafka-agent-key): records are signed under their agent's key (HMAC-SHA256), and a writer refuses records not signed so")
}

const writerUsage = `Consumes the records that ingest collectors (pcapsync collector --kafka)
or agents (pcapsync agent --kafka) produce to a Kafka topic, as a member
of a consumer group, and writes each agent's packets below --dir exactly
as a collector does: the same files, marks, rotation, retention, taps,
Redis feed and metrics. Several writers of one group share one --dir
(one machine, or one shared filesystem): each writes the agents of the
partitions it is assigned, at most one writer an agent at a time; a
partition's offset is committed once what came before it is as durable
as --fsync promises, so a writer that dies is replaced by another that
resumes there and drops by the marks what is already in a file
(docs/scale-out.md). --query-listen serves pcapsync query over the
root, as a collector does: --tls-cert and --tls-key (with
--tls-client-ca or --token-file), or --insecure; they apply to --tap
too.`

func writerCommand(s streams) *cobra.Command {
	return leaf("writer --kafka BROKERS --group GROUP --dir DIR [--kafka-topic TOPIC] [flags]",
		"write the records of a Kafka topic into pcapng files, as a member of a consumer group", writerUsage, noArgs,
		serveFlags(s, writerFlags, func(cfg *serve.Config) error {
			if len(cfg.Kafka.Brokers) == 0 || cfg.Group == "" {
				return fmt.Errorf("%w: a writer needs --kafka BROKERS and --group GROUP", errUsage)
			}
			cfg.Role = serve.RoleWriter
			return nil
		}))
}

// writerFlags defines a writer's flags: Kafka's, the store's, the
// feeds' and metrics.
func writerFlags(fs *pflag.FlagSet, cfg *serve.Config) givenOnly {
	kafkaFlagsOn(fs, &cfg.Kafka, "consume from these brokers (required)")
	fs.StringVar(&cfg.Group, "group", "pcapsync-writers", "the consumer group: the writers of one group share the topic's partitions and one --dir")
	fs.StringVar(&cfg.Kafka.PreviousRecordKeyFile, "kafka-record-key-previous", "", "with --kafka-record-key: a file holding the topic's previous record key, whose records are taken too while the producers move to the new one (docs/kafka.md, \"Record key\")")
	cfg.Collector.Store.Shared = true
	storeFlagsOn(fs, &cfg.Collector.Store)
	metricsFlagsOn(fs, &cfg.Metrics, metrics.DefaultWriterPort)
	securityFlagsOn(fs, cfg, "serve --query-listen in plain HTTP, without TLS: anyone who reaches it reads the captures (with --token-file, the token crosses the network in clear text)")
	return feedFlags(fs, cfg)
}

// storeFlagsOn defines the flags of the files written.
func storeFlagsOn(fs *pflag.FlagSet, st *store.Config) {
	fs.StringVar(&st.Dir, "dir", "", "output root: files go to DIR/<agent>/<agent>_<UTC start>.pcapng (required)")
	fs.Var(disabledSize{&st.RotateSize, store.DefaultRotateSize}, "rotate-size", "start a new file once one reaches this size, e.g. 100M, 1G; 0 disables")
	fs.Var(disabledDuration{&st.RotateInterval, store.DefaultRotateInterval}, "rotate-interval", "start a new file at every wall-clock multiple of this interval (UTC; 1h turns over on the hour); 0 disables")
	fs.TextVar(&st.FileCompress, "file-compress", st.FileCompress, "compress the files: none, gzip[:1-9] or zstd[:1-22] (.pcapng.gz, .pcapng.zst; Wireshark, tshark and capinfos read them; every acknowledgement ends a gzip member or flushes the zstd frame; see --file-zstd-frames); zstd alone is level 1, gzip alone 5; a file or member whose first bytes look random is compressed the cheap way (zstd: repeats sought only in the packets' headers; gzip: level 1)")
	fs.TextVar(&st.ZstdFrames, "file-zstd-frames", st.ZstdFrames, "with --file-compress zstd: file (one zstd frame per file, which every zstd reader reads whole, Wireshark 4.0's own too) or block (a frame per index block, so that a query decodes only the blocks it selects; zstd, zstdcat and zstdcat F | tshark -r - read such files whole, Wireshark 4.0's own zstd reader only the first frame)")
	fs.Var(fsyncFlag{&st.Fsync}, "fsync", "when written data is synced to disk: batch (before every acknowledgement), never (left to the OS; closed files are synced anyway unless never), or an interval such as 1s (an acknowledgement then means written to the OS: safe if the collector crashes, an OS crash can lose up to the interval)")
	fs.DurationVar(&st.IdleClose, "idle-close", store.DefaultIdleClose, "close an agent's file this long after its connection broke without a goodbye (a writer: give up an agent without a record for this long)")
	fs.IntVar(&st.MaxOpenFiles, "max-open-files", 0, "most agent files open at once; beyond it the least recently written (or, all in use, a random one) is closed, kept .part, and reopened for append when its agent writes again; 0: (RLIMIT_NOFILE - 256) / 2, the other half for connections; -1: no limit")
	fs.Var(disabledSize{&st.IndexBlock, store.DefaultIndexBlock}, "index-block", "index every file as it is written (FILE.idx beside it: packet times and the addresses, ports and protocols per block of this much pcapng, for queries; docs/index.md); 0 writes no index")
	fs.BoolVar(&st.Flows, "flows", store.DefaultFlows, "write a flow record per conversation beside every file as it is written (FILE.flows: who talked to whom, how much, when, how it ended, its Community ID, the index blocks holding its packets; docs/flows.md); --flows=false writes none")
	retainFlagsOn(fs, &st.Retain)
}
