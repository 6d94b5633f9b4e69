// Package timeline builds the timeline of an output root: packets,
// bytes and drops per interval per agent, from the data files' indexes
// and the interface statistics at their tails, never by reading
// packets (docs/console.md, Timeline). The console's GET /api/timeline
// and the query listener's GET /timeline serve it; a federated console
// merges the servers' (Merge).
package timeline
