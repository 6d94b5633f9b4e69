package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pcapsync/pcapsync/internal/journal"
)

// loggedRun runs args in-process (execute) with ctx, stderr a file,
// and JOURNAL_STREAM naming that file when journal is set, another
// file's otherwise. It returns the exit status, stdout and the lines
// of stderr.
func loggedRun(t *testing.T, ctx context.Context, journal bool, args ...string) (int, string, []string) {
	t.Helper()
	dir := t.TempDir()
	stderr, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	other, err := os.Create(filepath.Join(dir, "other"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if journal {
		t.Setenv("JOURNAL_STREAM", journalValue(t, stderr))
	} else {
		t.Setenv("JOURNAL_STREAM", journalValue(t, other))
	}
	var stdout bytes.Buffer
	code := execute(ctx, args, &stdout, stderr)
	b, err := os.ReadFile(stderr.Name())
	if err != nil {
		t.Fatal(err)
	}
	return code, stdout.String(), strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

func journalValue(t *testing.T, f *os.File) string {
	t.Helper()
	v, ok := journal.Value(f)
	if !ok {
		t.Fatalf("%s: no device and inode", f.Name())
	}
	return v
}

// TestJournalPriority: on the journal's stream (JOURNAL_STREAM names
// stderr) every line of a collector's log, text or JSON, and the fatal
// error of an agent start with the syslog priority of its level, so
// that "journalctl -p warning" shows the warnings; on any other stderr
// no line does.
func TestJournalPriority(t *testing.T) {
	stopped, cancel := context.WithCancel(context.Background())
	cancel() // the collector starts, logs and stops at once
	collector := func(format string) []string {
		return []string{"collector", "--dir", t.TempDir(), "--insecure", "--listen", "127.0.0.1:0", "--log-format", format}
	}
	failing := func(format string) []string {
		return []string{"agent", "-r", filepath.Join(t.TempDir(), "missing.pcap"), "--collector", "127.0.0.1:1", "--insecure", "--log-format", format}
	}
	for _, tc := range []struct {
		name    string
		ctx     context.Context
		args    []string
		journal bool
		code    int
		want    []string // "PREFIX|TEXT": a line that starts with PREFIX and holds TEXT
	}{
		{"collector text", stopped, collector("text"), true, 0, []string{"<6>time=|level=INFO", "<4>time=|level=WARN"}},
		{"collector json", stopped, collector("json"), true, 0, []string{`<6>{"time"|"level":"INFO"`, `<4>{"time"|"level":"WARN"`}},
		{"collector text elsewhere", stopped, collector("text"), false, 0, []string{"time=|level=INFO", "time=|level=WARN"}},
		{"collector json elsewhere", stopped, collector("json"), false, 0, []string{`{"time"|"level":"WARN"`}},
		{"fatal text", context.Background(), failing("text"), true, 1, []string{"<4>time=|level=WARN", "<3>pcapsync: agent: open |"}},
		{"fatal json", context.Background(), failing("json"), true, 1, []string{`<4>{"time"|"level":"WARN"`, `<3>{"time"|"msg":"exit"`}},
		{"fatal text elsewhere", context.Background(), failing("text"), false, 1, []string{"pcapsync: agent: open |"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, lines := loggedRun(t, tc.ctx, tc.journal, tc.args...)
			if code != tc.code {
				t.Fatalf("exit status %d, want %d; stderr:\n%s", code, tc.code, strings.Join(lines, "\n"))
			}
			for _, w := range tc.want {
				if !containsLine(lines, w) {
					t.Errorf("no line %q:\n%s", w, strings.Join(lines, "\n"))
				}
			}
			for _, l := range lines {
				if prefixed := strings.HasPrefix(l, "<"); prefixed != tc.journal {
					t.Errorf("line %q: prefixed %v, want %v", l, prefixed, tc.journal)
				}
			}
		})
	}
}

// containsLine reports whether a line starts with want's "PREFIX" and
// holds its "TEXT" ("PREFIX|TEXT").
func containsLine(lines []string, want string) bool {
	prefix, text, _ := strings.Cut(want, "|")
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) && strings.Contains(l, text) {
			return true
		}
	}
	return false
}

// TestJSONLogsAllJSON: with --log-format json every line a process
// writes to stderr is a JSON object, its fatal error included (level
// ERROR, msg "exit", err, status), and its summary on stdout is one
// JSON object too unless --summary says text.
func TestJSONLogsAllJSON(t *testing.T) {
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	t.Run("fatal", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			code int
		}{
			{[]string{"agent", "-r", filepath.Join(t.TempDir(), "missing.pcap"), "--collector", "127.0.0.1:1", "--insecure"}, 1},
			{[]string{"collector", "--dir", t.TempDir(), "--insecure", "--listen", "127.0.0.1:0", "--tls-cert", "x"}, 2},
		} {
			code, _, lines := loggedRun(t, context.Background(), false, append(tc.args, "--log-format", "json")...)
			if code != tc.code {
				t.Fatalf("%q: exit status %d, want %d", tc.args, code, tc.code)
			}
			recs := jsonLines(t, lines)
			last := recs[len(recs)-1]
			if last["level"] != "ERROR" || last["msg"] != "exit" || last["status"] != float64(tc.code) || last["err"] == "" || last["time"] == nil {
				t.Errorf("%q: last record %v, want level ERROR, msg exit, err, status %d, time", tc.args, last, tc.code)
			}
		}
	})
	t.Run("summary", func(t *testing.T) {
		for _, tc := range []struct {
			extra []string
			json  bool
		}{
			{nil, true},
			{[]string{"--summary", "text"}, false},
			{[]string{"--summary", "json"}, true},
		} {
			args := append([]string{"collector", "--dir", t.TempDir(), "--insecure", "--listen", "127.0.0.1:0", "--log-format", "json"}, tc.extra...)
			code, stdout, lines := loggedRun(t, stopped, false, args...)
			if code != 0 {
				t.Fatalf("%q: exit status %d: %q", args, code, lines)
			}
			jsonLines(t, lines)
			var sum map[string]any
			err := json.Unmarshal([]byte(stdout), &sum)
			if got := err == nil && strings.Count(stdout, "\n") == 1; got != tc.json {
				t.Errorf("%q: summary %q: one JSON object %v, want %v", args, stdout, got, tc.json)
			}
		}
	})
	t.Run("text by default", func(t *testing.T) {
		code, stdout, _ := loggedRun(t, stopped, false, "collector", "--dir", t.TempDir(), "--insecure", "--listen", "127.0.0.1:0")
		if code != 0 || !strings.HasPrefix(stdout, "pcapsync collector:") {
			t.Errorf("exit status %d, summary %q, want 0 and text", code, stdout)
		}
	})
}

// jsonLines parses every line as a JSON object.
func jsonLines(t *testing.T, lines []string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q is no JSON object: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}
