package agent

import (
	"context"
	"log/slog"
)

// transport is how batches travel to the collector: TCP (tcpSender:
// acknowledged, resent, optionally spooled) or UDP (udpLink: datagrams
// sent once). New picks one from Config.Transport; nothing after New
// asks which it is.
type transport interface {
	// batchLimits returns the batch size the builders seal at (the
	// Config's, or what one datagram carries) and the capacity of a
	// batch buffer before compression.
	batchLimits() (batchBytes, bufCap int)
	// prepareQueue sets how the queue charges batches, numbers them and
	// observes their release; called once, before any push.
	prepareQueue(q *queue)
	// run is the sender goroutine: it sends the queue's batches until
	// ctx ends, then says goodbye and returns nil, or returns the error
	// that ends the agent (a rejection, a TLS failure at the start).
	run(ctx context.Context) error
	// ownTraffic is a capture filter (tcpdump syntax) that excludes
	// what the agent itself sends to and receives from the collector.
	ownTraffic() string
	// replayRate is the packets per second a file replay is paced at;
	// 0: no pacing (the queue's backpressure paces it).
	replayRate() float64
	// report puts the transport's view into st: its own counters, and
	// no acknowledgements where nothing is acknowledged.
	report(st *Stats)
	// warnInsecure logs, once at New, what the transport leaves
	// unprotected, if anything.
	warnInsecure(log *slog.Logger)
}
