package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// fieldKey is a field as a library's format string names it ({pkg.Path}).
var fieldKey = regexp.MustCompile(`\{([a-z][a-z0-9]*(?:\.[A-Z][A-Za-z0-9]*)+)\}`)

// libraryFieldKeys returns every field key the non-test sources under
// internal/ name, in string literals ({pkg.Path}) or as fielderr.Key
// literals, with where, each checked to be of its own package.
func libraryFieldKeys(t *testing.T) map[string]string {
	t.Helper()
	keys := map[string]string{}
	err := filepath.WalkDir("../../internal", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			var lit *ast.BasicLit
			key := fieldKey.FindAllStringSubmatch
			switch n := n.(type) {
			case *ast.BasicLit:
				lit = n
			case *ast.CallExpr: // fielderr.Key("pkg.Path")
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok || sel.Sel.Name != "Key" || len(n.Args) != 1 {
					return true
				}
				if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "fielderr" {
					return true
				}
				if lit, ok = n.Args[0].(*ast.BasicLit); !ok {
					t.Errorf("%s: fielderr.Key of no literal: the test cannot list its field", fset.Position(n.Pos()))
					return true
				}
				key = func(s string, _ int) [][]string { return [][]string{{s, s}} }
			default:
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if lit.Kind != token.STRING || err != nil {
				return false
			}
			for _, m := range key(s, -1) {
				if pkg, _, _ := strings.Cut(m[1], "."); pkg != f.Name.Name {
					t.Errorf("%s: field %s is not of package %s", fset.Position(lit.Pos()), m[1], f.Name.Name)
				}
				keys[m[1]] = fset.Position(lit.Pos()).String()
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestFieldFlags: every Config field a library's error names has its
// flag in fieldFlags, and every flag there is one a command defines:
// no error reaches a user with a field's name instead of a flag's, and
// no entry is stale.
func TestFieldFlags(t *testing.T) {
	keys := libraryFieldKeys(t)
	if len(keys) < 50 {
		t.Fatalf("%d field keys under internal/: the scan is broken", len(keys))
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if _, ok := fieldFlags[k]; !ok {
			t.Errorf("%s: field %s has no flag in fieldFlags", keys[k], k)
		}
	}
	flags := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.InheritedFlags()
		c.Flags().VisitAll(func(f *pflag.Flag) { flags["--"+f.Name] = true })
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(newRoot(streams{}))
	flagName := regexp.MustCompile(`--[a-z][a-z-]*`)
	for k, v := range fieldFlags {
		if _, ok := keys[k]; !ok {
			t.Errorf("fieldFlags[%s]: no library error names the field", k)
		}
		names := flagName.FindAllString(v, -1)
		if len(names) == 0 {
			t.Errorf("fieldFlags[%s] = %q names no flag", k, v)
		}
		for _, n := range names {
			if !flags[n] {
				t.Errorf("fieldFlags[%s] = %q: no command has %s", k, v, n)
			}
		}
	}
}
