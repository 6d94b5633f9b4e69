package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// writeManPages writes a section-1 manual page for root and each of its
// commands into dir, from the definitions --help prints: pcapsync.1,
// pcapsync-agent.1, pcapsync-gen-certs.1, each titled by its name as git
// titles its pages (PCAPSYNC-AGENT(1), as git-log(1)).
func writeManPages(root *cobra.Command, dir string, stdout io.Writer) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	root.DisableAutoGenTag = true // the same pages for the same definitions
	// No Title: GenManTree titles each page by its command path.
	hdr := &doc.GenManHeader{Section: "1", Source: "pcapsync", Manual: "pcapsync manual"}
	if err := doc.GenManTree(root, hdr, dir); err != nil {
		return fmt.Errorf("writing manual pages: %w", err)
	}
	pages, _ := filepath.Glob(filepath.Join(dir, "*.1"))
	fmt.Fprintf(stdout, "wrote %d manual pages to %s\n", len(pages), dir)
	return nil
}
