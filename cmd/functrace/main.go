// Command functrace injects "defer functrace.Trace()()" into every
// function of the given Go files or packages, or removes it again, so
// that a build with -tags trace prints the call chain (see
// internal/functrace and docs/functrace.md).
//
// Usage:
//
//	functrace [-w] [-l] [-remove] FILE|DIR|PATTERN...
//
// A FILE is taken as given (a _test.go file too); a DIR stands for its
// .go files except tests, not its subdirectories; anything else is a
// package pattern for "go list" (./..., ./internal/agent). Without -w the
// rewritten source of a single file goes to stdout, and for several files
// the names of those that would change, as with -l; with -w the files are
// rewritten in place. Generated files and the functrace package itself
// are skipped. Running it twice changes nothing the second time.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "functrace:", err)
		}
		os.Exit(2)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("functrace", flag.ContinueOnError)
	fs.SetOutput(stderr)
	write := fs.Bool("w", false, "rewrite the files in place")
	list := fs.Bool("l", false, "list the files that change")
	remove := fs.Bool("remove", false, "remove the trace calls (and the import, once unused) instead")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: functrace [-w] [-l] [-remove] FILE|DIR|PATTERN...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return flag.ErrHelp
	}
	files, err := expand(fs.Args())
	if err != nil {
		return err
	}
	if len(files) > 1 && !*write {
		*list = true
	}
	for _, name := range files {
		src, err := os.ReadFile(name)
		if err != nil {
			return err
		}
		out, changed, err := rewrite(name, src, *remove)
		if err != nil {
			return err
		}
		if *list && changed {
			fmt.Fprintln(stdout, name)
		}
		if *write && changed {
			if err := writeFile(name, out); err != nil {
				return err
			}
		}
		if !*write && !*list {
			if _, err := stdout.Write(out); err != nil {
				return err
			}
		}
	}
	return nil
}

// expand turns the arguments into file names, in order, each once.
func expand(args []string) ([]string, error) {
	var files []string
	seen := map[string]bool{}
	add := func(name string) {
		if !seen[name] {
			seen[name] = true
			files = append(files, name)
		}
	}
	for _, arg := range args {
		st, err := os.Stat(arg)
		switch {
		case err == nil && !st.IsDir():
			add(arg)
			continue
		case err == nil:
			if err := addDir(arg, add); err != nil {
				return nil, err
			}
			continue
		case strings.HasSuffix(arg, ".go"):
			return nil, err
		}
		dirs, err := listPackages(arg)
		if err != nil {
			return nil, err
		}
		for _, dir := range dirs {
			if err := addDir(dir, add); err != nil {
				return nil, err
			}
		}
	}
	return files, nil
}

// addDir adds the .go files of dir but its tests.
func addDir(dir string, add func(string)) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		n := e.Name()
		if e.Type().IsRegular() && strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
			add(filepath.Join(dir, n))
		}
	}
	return nil
}

// listPackages asks "go list" for the directories of a package pattern.
func listPackages(pattern string) ([]string, error) {
	var stderr bytes.Buffer
	cmd := exec.Command("go", "list", "-f", "{{.Dir}}", pattern)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list %s: %w: %s", pattern, err, bytes.TrimSpace(stderr.Bytes()))
	}
	var dirs []string
	for line := range strings.Lines(string(out)) {
		if dir := strings.TrimSpace(line); dir != "" {
			dirs = append(dirs, dir)
		}
	}
	return dirs, nil
}

// writeFile replaces name's content, keeping its permissions.
func writeFile(name string, data []byte) error {
	st, err := os.Stat(name)
	if err != nil {
		return err
	}
	return os.WriteFile(name, data, st.Mode().Perm())
}
