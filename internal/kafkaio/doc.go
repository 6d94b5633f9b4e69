// Package kafkaio is the consuming side of pcapsync over Apache Kafka:
// the writer, a member of a consumer group that checks each record
// (internal/kafkarec: its format, its batch's checksum, its MAC) and
// writes it into a store as a collector's session would, exactly once
// per the group's committed offsets (docs/kafka.md). The producing side
// (record format, record key, producer) is internal/kafkarec, which
// agents and ingest collectors use without this package's store and
// collector beneath them.
package kafkaio
