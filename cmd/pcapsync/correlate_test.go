package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pcapsync/pcapsync/internal/correlate"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
)

// TestCorrelateFlags: what the command refuses, as usage errors.
func TestCorrelateFlags(t *testing.T) {
	dir := t.TempDir()
	for _, a := range []string{"a", "b"} {
		if err := os.Mkdir(filepath.Join(dir, a), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no dir", []string{"correlate", "--agent", "a,b"}, "--dir"},
		{"one agent", []string{"correlate", "--dir", dir, "--agent", "a"}, "two or more"},
		{"a glob", []string{"correlate", "--dir", dir, "--agent", "a", "--agent", "b*"}, "agent name"},
		{"no such agent", []string{"correlate", "--dir", dir, "--agent", "a,c"}, "no such agent"},
		{"bad time", []string{"correlate", "--dir", dir, "--agent", "a,b", "--since", "yesterday"}, "--since"},
		{"filter twice", []string{"correlate", "--dir", dir, "--agent", "a,b", "--filter", "udp", "tcp"}, "either"},
		{"bad filter", []string{"correlate", "--dir", dir, "--agent", "a,b", "udp port"}, "filter"},
		{"missing root", []string{"correlate", "--dir", filepath.Join(dir, "x"), "--agent", "a,b"}, "--dir"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := run(context.Background(), tc.args, &out, &errOut)
			if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run %q: %v, want a usage error about %q", tc.args, err, tc.want)
			}
		})
	}
}

// TestCorrelateEmpty: agents without packets give a report of zeros,
// as a table and as JSON, and an empty but valid unmatched pcapng.
func TestCorrelateEmpty(t *testing.T) {
	dir := t.TempDir()
	for _, a := range []string{"a", "b", "c"} {
		if err := os.Mkdir(filepath.Join(dir, a), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	w := filepath.Join(t.TempDir(), "u.pcapng")
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"correlate", "--dir", dir, "--agent", "a,b", "--agent", "c", "--window", "1s", "-w", w, "--json", "udp"}, &out, &errOut); err != nil {
		t.Fatalf("%v: %s", err, errOut.String())
	}
	var rep correlate.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if len(rep.Pairs) != 3 || rep.Pairs[0].From != "a" || rep.Pairs[2].To != "c" || rep.WindowNS != 1e9 || rep.DelayNote == "" {
		t.Errorf("report %+v", rep)
	}
	f, err := os.Open(w)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := pcapfile.NewReader(f, nil); err != nil {
		t.Errorf("unmatched pcapng: %v", err)
	}
	out.Reset()
	if err := run(context.Background(), []string{"correlate", "--dir", dir, "--agent", "a,b"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "a -> b") || !strings.Contains(out.String(), "offset between the two clocks") {
		t.Errorf("table:\n%s", out.String())
	}
}
