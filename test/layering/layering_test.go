// Package layering holds the test that keeps the package graph the one
// docs/architecture.md draws.
package layering

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/pcapsync/pcapsync/"

// TestImports compares every package's imports of this module's
// packages (go list, tests' imports not counted) with the "imports"
// block of docs/architecture.md, in both directions.
func TestImports(t *testing.T) {
	root := moduleRoot(t)
	want := allowed(t, filepath.Join(root, "docs", "architecture.md"))
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	seen := map[string]bool{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		pkg := strings.TrimPrefix(f[0], module)
		seen[pkg] = true
		allow, ok := want[pkg]
		if !ok {
			t.Errorf("package %s is not in docs/architecture.md's imports block: add its line", pkg)
			continue
		}
		var got []string
		for _, imp := range f[1:] {
			if rest, ok := strings.CutPrefix(imp, module); ok {
				got = append(got, rest)
			}
		}
		for _, imp := range got {
			if !slices.Contains(allow, imp) {
				t.Errorf("%s imports %s: an arrow docs/architecture.md does not allow", pkg, imp)
			}
		}
		for _, imp := range allow {
			if !slices.Contains(got, imp) {
				t.Errorf("docs/architecture.md lets %s import %s, which it no longer does: remove the arrow", pkg, imp)
			}
		}
	}
	for pkg := range want {
		if !seen[pkg] {
			t.Errorf("docs/architecture.md names package %s, which does not exist", pkg)
		}
	}
}

// allowed reads the fenced "imports" block of path: one line per
// package, "pkg: imp imp ...".
func allowed(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{}
	in := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "```imports":
			in = true
		case in && line == "```":
			return want
		case in && line != "":
			pkg, imps, ok := strings.Cut(line, ":")
			if !ok {
				t.Fatalf("%s:%d: want \"package: imports...\", got %q", path, n, line)
			}
			if _, dup := want[pkg]; dup {
				t.Fatalf("%s:%d: package %s listed twice", path, n, pkg)
			}
			want[pkg] = strings.Fields(imps)
		}
	}
	t.Fatalf("%s: no complete ```imports block", path)
	return nil
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// farRules are the dependencies a package must not have, through any
// chain of imports: the seams the parts are built along. "dir/..." is
// the package dir and every package below it.
var farRules = []struct {
	pkgs, never []string
	why         string
}{
	{
		pkgs:  []string{"internal/agent"},
		never: []string{"internal/store", "internal/collector", "internal/index", "internal/kafkaio"},
		why:   "an agent captures and sends; the files are the collector's",
	},
	{
		pkgs:  []string{"internal/query", "internal/correlate", "internal/queryhttp", "internal/flowquery", "internal/federate", "internal/console"},
		never: []string{"internal/store", "internal/collector", "internal/tap", "internal/agent", "internal/serve", "internal/kafkaio", "internal/kafkarec", "internal/kafkaconn", "internal/redisfeed"},
		why:   "the read side meets the ingest side only in the store's files, read through internal/layout without a Store",
	},
	{
		pkgs:  []string{"internal/layout"},
		never: []string{"internal/store", "internal/collector", "internal/query", "internal/observe"},
		why:   "the file layout is read by the writer and the readers alike: it knows neither",
	},
	{
		pkgs:  []string{"internal/retention"},
		never: []string{"internal/store", "internal/collector", "internal/query", "internal/kafkaio", "internal/serve"},
		why:   "retention is a policy over file metadata and its enforcer, fed by the store's events: it knows no writer and no reader",
	},
	{
		pkgs:  []string{"cmd/pcapsync"},
		never: []string{"internal/bench/...", "internal/testutil/...", "internal/gen/capgen"},
		why:   "the product binary holds no benchmark code and no test helper (pcapsync bench is the lab build's: -tags lab)",
	},
	{
		pkgs:  []string{"internal/flow"},
		never: []string{"internal/store", "internal/collector", "internal/query", "internal/index", "internal/serve", "internal/kafkaio"},
		why:   "flow records are a small core the store feeds and the read side parses; it knows neither",
	},
	{
		pkgs:  []string{"internal/kafkarec", "internal/filter", "internal/frontdoor", "internal/wire", "internal/pcapfile", "internal/fielderr"},
		never: []string{"internal/store", "internal/collector", "internal/query"},
		why:   "small parts many share stay small",
	},
}

// TestFarImports checks farRules over every package's dependencies
// (go list -deps, tests not counted).
func TestFarImports(t *testing.T) {
	root := moduleRoot(t)
	for _, r := range farRules {
		for _, pkg := range r.pkgs {
			cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "./"+pkg)
			cmd.Dir = root
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("go list -deps %s: %v", pkg, err)
			}
			deps := strings.Fields(string(out))
			if len(deps) < 2 {
				t.Fatalf("go list -deps %s: %q, want the package and what it imports", pkg, deps)
			}
			for _, d := range deps {
				if rest, ok := strings.CutPrefix(d, module); ok && slices.ContainsFunc(r.never, func(n string) bool { return matchPkg(n, rest) }) {
					t.Errorf("%s depends on %s (through its imports): %s", pkg, rest, r.why)
				}
			}
		}
	}
}

// matchPkg reports whether pkg is pattern, or below it when pattern
// ends in "/...".
func matchPkg(pattern, pkg string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == base || strings.HasPrefix(pkg, base+"/")
	}
	return pkg == pattern
}
