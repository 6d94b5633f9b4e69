// Package serve runs a collector process: from one Config it builds the
// store and the collector's core (collector.NewCore), the intakes
// agents send to (collector.Server over TCP, collector.UDPServer), the
// live views hanging off the core's Feed (a tap.Tap, a redisfeed.Feed)
// and the metrics listener, and Run runs them all and shuts them down
// in order. cmd/pcapsync's collector and writer map their flags to a
// Config, its Role included, and call New and Run.
//
// The Role is explicit, never inferred from which fields are set; New
// assembles each role in its own function: openCollector (the agents'
// TCP and UDP listeners, the store, the feeds), openIngest (the agents'
// TCP listener and a core whose destination is the Kafka producer, no
// store) and openWriter (the topic, the shared store, the feeds and the
// kafkaio.Writer consuming into the core); each sets the intake Run
// runs.
//
// Config.Validate holds the rules that span parts (UDP needs Insecure,
// a tap or Redis setting needs its tap or Redis URL) and calls each
// enabled part's own Validate; New reads the files the Config names
// (TLS certificates and keys, the token) and opens every listener
// before anything runs, so that a bad file or a taken port fails the
// start.
//
// Shutdown (Run, once its context ends): the intakes stop accepting and
// let every session commit; the taps send what they queued; the store's
// ticker stops and the core closes (files closed and synced, high-water
// marks saved); the metrics listener stops; the Redis feed publishes
// what is queued for at most its DrainTimeout. The counters then stay
// readable (Core, UDP, Tap, Redis) for the exit summary.
package serve
