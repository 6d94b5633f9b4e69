package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRun rewrites a directory in place and back: -w, -l, -remove, the
// single-file listing to stdout, and the skipped test file.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	const plain = "package p\n\nfunc f() {\n\tprintln()\n}\n"
	files := map[string]string{"a.go": plain, "b.go": plain, "a_test.go": plain}
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	a, b := filepath.Join(dir, "a.go"), filepath.Join(dir, "b.go")
	runOK := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if err := run(args, &stdout, &stderr); err != nil {
			t.Fatalf("run %q: %v\n%s", args, err, stderr.String())
		}
		return stdout.String()
	}
	read := func(name string) string {
		t.Helper()
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	if got := runOK(dir); got != a+"\n"+b+"\n" {
		t.Errorf("functrace DIR lists %q, want a.go and b.go", got)
	}
	if got := runOK(a); !strings.Contains(got, "defer functrace.Trace()()") {
		t.Errorf("functrace FILE prints:\n%s", got)
	}
	if read(a) != plain {
		t.Error("functrace without -w changed the file")
	}
	if got := runOK("-w", "-l", dir); got != a+"\n"+b+"\n" {
		t.Errorf("functrace -w -l DIR lists %q", got)
	}
	if !strings.Contains(read(b), "defer functrace.Trace()()") {
		t.Errorf("after -w:\n%s", read(b))
	}
	if read(filepath.Join(dir, "a_test.go")) != plain {
		t.Error("the test file was rewritten")
	}
	if got := runOK("-w", "-l", dir); got != "" {
		t.Errorf("a second -w changes %q", got)
	}
	runOK("-w", "-remove", dir)
	if read(a) != plain || read(b) != plain {
		t.Errorf("after -remove:\n%s", read(a))
	}
	if err := run([]string{filepath.Join(dir, "missing.go")}, &bytes.Buffer{}, &bytes.Buffer{}); err == nil {
		t.Error("a missing file is no error")
	}
}
