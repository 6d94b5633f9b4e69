// Package queryhttp serves pcapsync query over HTTPS, for the collector
// and the writer (--query-listen), and is its client (pcapsync query
// --from).
//
// # API
//
//	GET /query?agent=..&iface=..&since=..&until=..&filter=..&community_id=..&count=..&max_bytes=..
//	GET /flows?agent=..&iface=..&since=..&until=..&filter=..&community_id=..
//	GET /timeline?agent=..&since=..&until=..&step=..
//	GET /markers?agent=..&since=..&until=..&step=..
//
// community_id (query --community-id, "1:" and 28 base64 characters
// only) reads the blocks the server's flow records name for it
// (flowquery.Blocks), as a local query does; on GET /flows it selects
// the flow records of that Community ID only (flows --community-id),
// checked as GET /query checks it.
//
// GET /flows (flows.go, pcapsync flows --from) answers the flow records
// of the root (internal/flowquery) as JSON lines (application/x-ndjson,
// flowquery.JSON), with the parameters, refusals, slots and limits of
// GET /query but count and max_bytes; a selection beyond
// flowquery.DefaultMaxFlows is a 400.
//
// The parameters are the query's flags (agent and iface repeated or
// comma-separated; since and until as query.ParseTime reads them, a
// relative time resolved on the server's clock; max_bytes a size such
// as 100M); an unknown or repeated one is refused, so that a typo never
// widens a selection. The server's output root is the root of every
// query: a client names agents (validated as agent names, or globs
// without '/'), never paths. The answer is 200 with the pcapng
// (application/x-pcapng), streamed as query.Run writes it, and the
// query.Result as JSON in the trailer Pcapsync-Result; a query that
// fails after its stream began ends with a valid pcapng of what was
// written and the error in the trailer Pcapsync-Error. GET /flows
// answers the flows as JSON lines, then FlowsResult (the counts, the
// data kept, whether it had anything to answer from; no path of the
// server) in the trailer Pcapsync-Result. A bad parameter
// is 400 with the message the CLI gives; a refusal 401 or 403, too many
// queries running 503, each with a one-line reason in a text/plain
// body.
//
// # Authentication
//
// As the agents' and the tap's (internal/tap): with the collector's TLS
// configuration a listener speaks TLS; with client CAs, a client
// certificate signed by them is required (checked after the handshake,
// so that a refusal is a 401 or 403 with its reason, not a failed
// handshake); with a token, every request carries it as
// "Authorization: Bearer TOKEN", the scheme in any case (compared as frontdoor.TokenEqual
// does). Without TLS the listener is plain HTTP; with TLS, a listener on
// a loopback address also takes plain HTTP clients (told apart by the
// first byte), who need no certificate but do need the token.
//
// # Limits
//
// A filter beyond capture.CheckFilter's limits is refused with the
// parameters (400), before it costs anything. At most Config.MaxQueries
// run at once (503 beyond); an admitted query's filter is compiled once
// (query.Prepare), within CompileTimeout (503 past it: libpcap compiles
// one filter at a time and cannot be interrupted). A client that goes
// away cancels its query, its wait for the compiler too; one that takes
// no bytes for WriteTimeout is cut off. Each query uses query.Run's
// memory bound (Config.ReorderMem) and runs in its request's goroutine
// without read-ahead (QueryThreads: the collector's cores are the
// capture's).
// Counters count requests by result, bytes and packets served and the
// queries running; Run stops the running queries when its context ends.
//
// With Config.Handler set, a Server is the front door of another
// read-only service instead (the console, internal/console): the same
// listener, caps, TLS and plain-HTTP rules, then every request goes to
// the Handler with what the door knows of its client (ClientOf: a
// verified client certificate); the Handler authenticates it.
// ParseQuery and ParseFlows give such a service GET /query's and GET
// /flows's parameter rules.
package queryhttp
