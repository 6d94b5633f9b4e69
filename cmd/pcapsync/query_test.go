package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pcapsync/pcapsync/internal/capture"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
)

// TestQueryFlags: bad query flags are usage errors that say what is
// wrong.
func TestQueryFlags(t *testing.T) {
	dir := t.TempDir()
	q := []string{"query", "--dir", dir, "-w", "-"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"query", "-w", "-"}, "query needs --dir"},
		{[]string{"query", "--dir", dir, "--print"}, "--print goes with -w FILE"},
		{append(q, "--print"), "--print goes with -w FILE"},
		{append(q, "--since", "2026-11-24 10:00:00", "--until", "2026-11-24 09:00:00"), "empty time range"},
		{append(q, "--since", "2026-02-30 10:00:00"), "--since: bad time"},
		{append(q, "--follow-delay", "-1s"), "follow delay"},
		{append(q, "--reorder-mem", "lots"), "reorder-mem"},
		{append(q, "--threads", "-1"), "threads -1 is negative"},
		{[]string{"query", "--from", "127.0.0.1:1", "-w", "-", "--insecure", "--threads", "2"}, "--threads are the server's"},
		{append(q, "--summary", "xml"), "summary"},
		{append(q, "--count", "x"), "count"},
		{append(q, "--no-such-flag"), "unknown flag"},
		{[]string{"query", "--dir", filepath.Join(dir, "nope"), "-w", "-"}, "no such file"},
		{append(q, "--since", "yesterday"), "--since"},
		{append(q, "--until", "-5m"), "--until"},
		{append(q, "--since", "2300-01-01T00:00:00Z"), `--since: bad time: "2300-01-01T00:00:00Z" is out of range: want a time from 1677-09-21T00:12:43.145224192Z to 2262-04-11T23:47:16.854775807Z`},
		{append(q, "--until", "2262-04-12T00:00:00Z"), `--until: bad time: "2262-04-12T00:00:00Z" is out of range`},
		{append(q, "--since", "1600-01-01T00:00:00Z"), `--since: bad time: "1600-01-01T00:00:00Z" is out of range`},
		{append(q, "--since", "2026-11-24T10:00:00Z", "--until", "2026-11-24T09:00:00Z"), "empty time range"},
		{append(q, "udp", "port", "99999"), "filter"},
		{append(q, "--filter", "udp", "tcp"), "either with --filter or as arguments"},
		{append(q, "--agent", "[x"), "agent pattern"},
		{append(q, "--max-bytes", "lots"), "max-bytes"},
		{append(q, "--count", "-1"), "count"},
		{append(q, "--from", "127.0.0.1:1"), "--dir and --from exclude each other"},
		{append(q, "--insecure"), "go with --from"},
		{[]string{"query", "--from", "127.0.0.1:1", "-w", "-", "--insecure", "--reorder-mem", "1M"}, "--reorder-mem, --no-index and --threads are the server's"},
		{[]string{"query", "--from", "127.0.0.1:1", "-w", "-", "--insecure", "--no-index"}, "--reorder-mem, --no-index and --threads are the server's"},
		{[]string{"query", "--from", "127.0.0.1:1", "-w", "-", "--insecure", "--follow"}, "--follow is not served over --from"},
		{[]string{"query", "--from", "127.0.0.1:1", "--insecure", "--since", "2026-02-30 10:00:00"}, "--since: bad time"},
		{[]string{"query", "--from", "127.0.0.1:1", "--insecure", "--until", "2026-11-24 09:00:00+99:00"}, "--until: bad time"},
		{[]string{"query", "--from", "127.0.0.1:1", "--insecure", "--token-file", "/no/such/token"}, "token"},
		{[]string{"query", "--from", "127.0.0.1:1", "--tls-ca", "/no/such/ca.pem"}, "ca.pem"},
		{[]string{"query", "--from", "127.0.0.1:1", "--insecure", "--print"}, "--print goes with -w FILE"},
		{[]string{"query", "--from", "127.0.0.1:1", "-w", "-", "--insecure", "--tls-ca", "x.pem"}, "exclude each other"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), tc.args, &out, &errOut)
		if !errors.Is(err, errUsage) || exitCode(err) != 2 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want a usage error with %q", tc.args, err, tc.want)
		}
	}
}

// TestQueryMissingDir: a missing --dir is refused before -w FILE is
// made.
func TestQueryMissingDir(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.pcapng")
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"query", "--dir", filepath.Join(dir, "nope"), "-w", out}, &stdout, &stderr)
	if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "--dir: stat ") {
		t.Errorf("err = %v, want the usage error \"--dir: stat ...\"", err)
	}
	if _, err := os.Stat(out); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("-w %s: %v, want it not made", out, err)
	}
}

// TestQueryEmpty: a query over a root without agents writes a valid
// pcapng without packets, and its summary, and exits 3: nothing to
// answer from.
func TestQueryEmpty(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(t.TempDir(), "out.pcapng")
	var so, se bytes.Buffer
	err := run(context.Background(), []string{"query", "--dir", dir, "-w", out, "--since", "10m", "--summary", "json", "udp"}, &so, &se)
	if !errors.Is(err, errUncovered) || exitCode(err) != 3 || !strings.Contains(err.Error(), "it holds no agent") {
		t.Fatalf("%v, want exit 3: nothing to answer from", err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := pcapfile.NewReader(f, nil); err != nil {
		t.Fatalf("output: %v", err)
	}
	if !strings.Contains(se.String(), `"packets":0`) || so.Len() != 0 {
		t.Errorf("stdout %q, stderr %q", so.String(), se.String())
	}
}

// TestQueryCompilesOnce: a local query and a correlation compile their
// filter once; a filter that does not compile is a usage error before
// -w FILE is made.
func TestQueryCompilesOnce(t *testing.T) {
	dir := t.TempDir()
	for _, a := range []string{"a", "b"} {
		if err := os.Mkdir(filepath.Join(dir, a), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "out.pcapng")
	for _, args := range [][]string{
		{"query", "--dir", dir, "-w", out, "udp", "port", "53"},
		{"correlate", "--dir", dir, "--agent", "a,b", "udp", "port", "53"},
	} {
		before := capture.FilterCompiles()
		var so, se bytes.Buffer
		// The agents have no files: the query has nothing to answer from.
		if err := run(context.Background(), args, &so, &se); err != nil && !errors.Is(err, errUncovered) {
			t.Fatalf("%q: %v", args, err)
		}
		if n := capture.FilterCompiles() - before; n != 1 {
			t.Errorf("%s: %d compiles of the filter, want 1", args[0], n)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.pcapng")
	var so, se bytes.Buffer
	err := run(context.Background(), []string{"query", "--dir", dir, "-w", bad, "udp", "port", "99999"}, &so, &se)
	if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "filter: ") {
		t.Errorf("bad filter: %v, want a usage error", err)
	}
	if _, err := os.Stat(bad); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("-w %s: %v, want it not made", bad, err)
	}
}

// TestQueryLongSelection: 10 000 agent globs on the command line run
// (the section comment recording them once failed the query), and the
// warning that none matches does not repeat them all.
func TestQueryLongSelection(t *testing.T) {
	globs := make([]string, 10_000)
	for i := range globs {
		globs[i] = fmt.Sprintf("web%04d*", i)
	}
	out := filepath.Join(t.TempDir(), "out.pcapng")
	var stdout, stderr bytes.Buffer
	args := []string{"query", "--dir", t.TempDir(), "-w", out, "--agent", strings.Join(globs, ",")}
	err := run(context.Background(), args, &stdout, &stderr)
	if !errors.Is(err, errUncovered) {
		t.Fatalf("%v (stderr %.300q), want nothing to answer from", err, stderr.String())
	}
	if n := stderr.Len(); n > 4<<10 || !strings.Contains(stderr.String(), "(10000 patterns)") {
		t.Errorf("stderr of %d bytes: %.300q..., want the patterns counted", n, stderr.String())
	}
	if n := len(err.Error()); n > 4<<10 || !strings.Contains(err.Error(), "(10000 patterns)") {
		t.Errorf("error of %d bytes: %.300q..., want the patterns counted", n, err.Error())
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := pcapfile.NewReader(f, nil); err != nil {
		t.Errorf("output: %v", err)
	}
}

// TestQueryThreads: --threads N writes the pcapng and the lines that
// --threads 1 writes, byte for byte, and its summary.
func TestQueryThreads(t *testing.T) {
	dir := writeRoot(t, 3000, "web1", "db1", "db2")
	for _, w := range [][]string{{"-w", "-"}, nil} {
		var first, firstErr string
		for _, n := range []string{"1", "2", "5"} {
			args := append([]string{"query", "--dir", dir, "--threads", n}, w...)
			so, se, err := queryRun(args...)
			if err != nil {
				t.Fatalf("%q: %v (%s)", args, err, se)
			}
			if n == "1" {
				first, firstErr = so, se
				if len(so) < 3000*3*40 {
					t.Fatalf("%q: %d bytes of output", args, len(so))
				}
				continue
			}
			if so != first || se != firstErr {
				t.Errorf("%q: %d bytes, %q; --threads 1: %d bytes, %q", args, len(so), se, len(first), firstErr)
			}
		}
	}
}
