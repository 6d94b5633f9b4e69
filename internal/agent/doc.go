// Package agent captures packets (live from interfaces, or replayed from
// a file), packs them into batches and streams them to a collector over
// one TCP connection (TLS unless Config.Insecure), keeping every batch
// until it is acknowledged and resending what is missing after a
// reconnect. Over UDP (Config.Transport, udp.go) each batch is one
// datagram sent once: lowest latency, losses counted by the collector.
// With Config.Kafka (kafka.go) there is no collector: each batch is
// produced to a Kafka topic as the record an ingest collector would
// produce, and Kafka's acknowledgement releases it. The transport is
// chosen once, in New (transport.go: tcpSender, udpLink or
// kafkaSender); nothing on the packet path asks which it is. A collector
// silent for Config.PeerTimeout (no ack, no heartbeat) is taken for
// dead and the connection made anew.
//
// Config's zero value means the defaults (the Default... constants, and
// liveness.DefaultHeartbeat and DefaultPeerTimeout); Validate checks
// every rule, and New calls it.
//
// Goroutines: one per source (an interface, or the file) that reads
// packets and seals batches; one sender (the transport's run) that owns
// the connection (dial, handshake, send, stats, pings, reconnect with
// backoff) or the UDP socket; one ack reader per connection (UDP: one
// reply reader). They meet in the queue, a byte-bounded list of
// sealed batches. A live source never blocks on a full queue: it drops
// the batch and counts its packets. A file replay waits for room
// instead.
package agent
