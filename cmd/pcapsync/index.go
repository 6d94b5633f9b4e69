package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pcapsync/pcapsync/internal/flow/flowfile"
	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/store"
)

const indexUsage = `Gives every closed capture file below DIR (an output root of a
collector or writer, or one agent's directory) a valid index: files
without one (written before indexes existed, or left by a crash) and
files whose index is damaged, stale, untrusted (written by another
user) or not a regular file are indexed again; indexes whose capture
file is gone are removed. Files named like indexes that pcapsync did
not make are left alone and listed. Files still being written (.part) are
left to the store. Each file's flow records (FILE.flows, docs/flows.md)
are checked too and, missing or unsound, rebuilt from the file with its
index in one pass (--flows=false: indexes only). Each file with a sound
index gets its timeline summary (FILE.timeline) if it has none sound.
Safe to run while the
collector writes and deletes files; running it again does nothing more.
See docs/index.md.`

func indexCommand(s streams) *cobra.Command {
	return leaf("index DIR [--json]", "build the missing or damaged indexes of closed capture files",
		indexUsage, exactOneArg, func(fs *pflag.FlagSet) runFunc {
			var asJSON bool
			flows := store.DefaultFlows
			fs.BoolVar(&asJSON, "json", false, "print the report as one JSON object")
			fs.BoolVar(&flows, "flows", store.DefaultFlows, "also rebuild each file's missing or unsound flow records (FILE.flows), with its index")
			return func(ctx context.Context, args []string) error {
				rebuild := index.RebuildDir
				if flows {
					rebuild = flowfile.RebuildDir
				}
				rep, err := rebuild(ctx, args[0], 0)
				if err != nil {
					return fmt.Errorf("indexing %s: %w", args[0], err)
				}
				if asJSON {
					if err := json.NewEncoder(s.stdout).Encode(rep); err != nil {
						return err
					}
				} else {
					printIndexReport(s, rep)
				}
				if rep.Failed > 0 {
					return fmt.Errorf("%d files could not be indexed", rep.Failed)
				}
				return nil
			}
		})
}

// printIndexReport prints rep as a line, its failures and the foreign
// files it left alone on stderr.
func printIndexReport(s streams, rep index.DirReport) {
	fmt.Fprintf(s.stdout, "pcapsync index: %d files: %d indexes valid, %d built, %d rebuilt (damaged, stale or untrusted), %d failed, %d files gone meanwhile; %d orphan indexes and %d temporary files removed; %d foreign files left alone; %d bytes written\n",
		rep.Files, rep.Valid, rep.Built, rep.Rebuilt, rep.Failed, rep.Gone, rep.Orphans, rep.Temps, rep.Foreign, rep.Bytes)
	if rep.Sidecars > 0 {
		fmt.Fprintf(s.stdout, "pcapsync index: %d flow files built (%d bytes), each with its index\n", rep.Sidecars, rep.SidecarBytes)
	}
	if rep.SidecarOrphans > 0 || rep.SidecarTemps > 0 {
		fmt.Fprintf(s.stdout, "pcapsync index: %d orphan flow files and %d temporary flow files removed\n", rep.SidecarOrphans, rep.SidecarTemps)
	}
	if rep.Timelines > 0 || rep.TimelineOrphan > 0 {
		fmt.Fprintf(s.stdout, "pcapsync index: %d timeline summaries written (%d bytes); %d orphan or temporary ones removed\n", rep.Timelines, rep.TimelineBytes, rep.TimelineOrphan)
	}
	for _, e := range rep.Errors {
		fmt.Fprintln(s.stderr, "pcapsync index:", e)
	}
	for _, f := range rep.ForeignFiles {
		fmt.Fprintln(s.stderr, "pcapsync index: not made by pcapsync, left alone:", f)
	}
}

// exactOneArg wants one positional argument.
func exactOneArg(c *cobra.Command, args []string) error {
	if len(args) != 1 {
		return usageError("%s: want one argument, got %d", c.CommandPath(), len(args))
	}
	return nil
}
