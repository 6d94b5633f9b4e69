package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestServerList: --from takes one server or several separated by
// commas, --servers FILE one per line with comments; both together
// keep --from's first; duplicates, empty lists, bad lines and too many
// servers are usage errors naming what to give.
func TestServerList(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	list := write("list", "# site A\n\n  b.example:7780\n[::1]:7781\n")
	var sb strings.Builder
	for i := range maxServers + 1 {
		fmt.Fprintf(&sb, "h%d:7780\n", i)
	}
	many := write("many", sb.String())
	for _, tc := range []struct {
		from, file string
		want       []string
		err        string
	}{
		{from: "", file: "", want: []string{}},
		{from: "a:1", want: []string{"a:1"}},
		{from: "a:1, b:2,https://c:3", want: []string{"a:1", "b:2", "c:3"}},
		{from: "a:1", file: list, want: []string{"a:1", "b.example:7780", "[::1]:7781"}},
		{file: list, want: []string{"b.example:7780", "[::1]:7781"}},
		{from: "a:1,a:1", err: "server a:1 named twice"},
		{from: "b.example:7780", file: list, err: "named twice"},
		{from: ",", err: "want HOST:PORT, or several separated by commas"},
		{from: "a", err: "want HOST:PORT"},
		{file: write("empty", "# nothing\n"), err: "no server in it"},
		{file: write("two", "a:1 b:2\n"), err: "line 1"},
		{file: filepath.Join(dir, "missing"), err: "--servers"},
		{file: many, err: "at most 256 at once"},
	} {
		got, err := serverList(tc.from, tc.file, false)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, errUsage)):
			t.Errorf("%q %q: %v, want a usage error with %q", tc.from, tc.file, err, tc.err)
		case tc.err == "" && (err != nil || !slices.Equal(got, tc.want) && len(got)+len(tc.want) > 0):
			t.Errorf("%q %q: %q, %v; want %q", tc.from, tc.file, got, err, tc.want)
		}
	}
}
