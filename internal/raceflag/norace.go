//go:build !race

// Package raceflag tells tests whether the race detector is on: it
// makes sync.Pool drop items at random, so allocation counts mean
// nothing under it.
package raceflag

// Enabled reports whether the binary was built with -race.
const Enabled = false
