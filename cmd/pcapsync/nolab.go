//go:build !lab

package main

import "github.com/spf13/cobra"

// labCommands: none in the product build. The benchmarks and load tools
// (pcapsync bench) are the lab build's (go build -tags lab), so the
// product binary holds no benchmark code, no test helper and nothing
// that runs tcpdump, rsync, mergecap or a JVM.
func labCommands(streams) []*cobra.Command { return nil }
