//go:build lab

package main

import "github.com/spf13/cobra"

// labCommands are the lab's commands, in the lab build only (go build
// -tags lab: docs/architecture.md, "The lab"): pcapsync bench.
func labCommands(s streams) []*cobra.Command { return []*cobra.Command{benchCommand(s)} }
