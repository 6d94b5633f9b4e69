// Package console serves a read-only console of one output root to a
// browser: pages (Agents, Flows, Packets) and the JSON they read under
// /api/, every asset embedded in the binary (go:embed), under a strict
// Content-Security-Policy (no inline script or style, no framing, no
// other origin).
//
// It is the read side only: the agents' coverage comes from
// internal/query, the flows from internal/flowquery, the packet lines
// from internal/pktline, a download from query.Prepared.Run, the
// selection parameters are GET /query's and GET /flows's
// (queryhttp.ParseQuery, ParseFlows). Nothing it serves changes
// anything but the login's session.
//
// A Handler authenticates each request itself: a client certificate
// the front door verified (queryhttp.ClientOf), or a session cookie
// that POST /login sets for the right token. With neither a token nor
// client certificates configured, every client is admitted, as the
// query listener admits it. A Handler is safe for concurrent use.
package console
