package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"github.com/pcapsync/pcapsync/internal/agent"
	"github.com/pcapsync/pcapsync/internal/serve"
)

// summaryFormat is the --summary flag: how the agent and the collector
// print what they did, on stdout, when they exit.
type summaryFormat uint8

const (
	summaryText summaryFormat = iota // lines for people, each "pcapsync PROCESS: ..."
	summaryJSON                      // one JSON object on one line, for scripts and log shippers
)

// addSummaryFlag registers --summary on fs; its default is text, json
// with --log-format json (follow).
func addSummaryFlag(fs *pflag.FlagSet) *summaryFormat {
	f := new(summaryFormat)
	fs.Var(f, "summary", "print the summary at exit as text (lines for people) or json (one object on one line: see README's Summaries)")
	return f
}

// follow makes f json when fs's --summary was not set (by the flag, the
// variable or the configuration file) and the log format lf is json: a
// process whose logs go to a shipper as JSON prints its summary as JSON
// too.
func (f *summaryFormat) follow(fs *pflag.FlagSet, lf *logFlags) {
	if !fs.Changed("summary") && lf.format == "json" {
		*f = summaryJSON
	}
}

func (f *summaryFormat) String() string {
	if f != nil && *f == summaryJSON {
		return "json"
	}
	return "text"
}

func (*summaryFormat) Type() string { return "format" }

func (f *summaryFormat) Set(s string) error {
	switch s {
	case "text":
		*f = summaryText
	case "json":
		*f = summaryJSON
	default:
		return fmt.Errorf("%q: want text or json", s)
	}
	return nil
}

// processSummary is what a process prints at exit: a struct whose JSON
// form is the json format, and which writes its own text lines.
type processSummary interface {
	writeText(w io.Writer) error
}

// print writes s to w in format f.
func (f summaryFormat) print(w io.Writer, s processSummary) error {
	if f == summaryJSON {
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			return fmt.Errorf("writing the summary: %w", err)
		}
		return nil
	}
	if err := s.writeText(w); err != nil {
		return fmt.Errorf("writing the summary: %w", err)
	}
	return nil
}

// agentSummary is the agent process's summary; its JSON is
// agent.Summary's.
type agentSummary struct {
	agent.Summary
}

func (s agentSummary) writeText(w io.Writer) error {
	_, err := fmt.Fprintln(w, "pcapsync agent:", s.Summary)
	return err
}

// collectorSummary is the collector process's summary; its JSON is
// serve.Summary's.
type collectorSummary struct {
	serve.Summary
}

func (s collectorSummary) writeText(w io.Writer) error { return s.WriteText(w) }
