//go:build race

package e2e

// The tests were built with -race: build the binary under test with it
// too, so that data races in the product fail the end-to-end runs.
func init() { raceBuild = true }
