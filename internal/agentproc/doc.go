// Package agentproc runs an agent process, as package serve runs a
// collector's: from one Config it opens the metrics listener (before
// anything else, so that a taken port fails the start), builds the
// agent (agent.New: capture or file, spool, collectors resolved), hands
// the spool to Config.User and switches to that user (when started as
// root), and Run then serves the metrics and runs the agent until its
// context ends (or its file is sent) and returns its summary.
// cmd/pcapsync's agent maps its flags to a Config and calls New and
// Run; the caller owns the signals (Run's context) and prints the
// summary.
//
// Config.Validate holds the agent's and the metrics listener's rules;
// its errors, like those of New, name Config fields (fielderr), which
// a program shows in its own words (cmd/pcapsync: as flags).
//
// A Process is run once; it is not safe for concurrent use.
package agentproc
