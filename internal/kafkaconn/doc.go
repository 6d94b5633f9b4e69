// Package kafkaconn connects pcapsync to Apache Kafka brokers: the
// settings every Kafka role shares (brokers, topic, TLS from PEM files,
// SASL/SCRAM with the password in a file), checked by Config.Validate
// and turned into franz-go client options by Config.Opts; the topic
// created when absent (EnsureTopic); and the largest record batch the
// topic accepts (MaxRecordBytes).
//
// It says nothing about producing or consuming: callers add those
// options (acks, idempotence, batch sizes, groups) to what Opts returns.
// Nothing here logs; errors say what failed and wrap the broker's error
// (a kerr.Error: test with errors.Is) and this package's sentinels.
//
// A Config is a value, safe to copy and to use from several goroutines;
// EnsureTopic and MaxRecordBytes are safe for concurrent use, as the
// *kgo.Client they take is.
package kafkaconn
