package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines is the longest function this package may hold: it maps
// flags to the packages' Configs and calls them, so anything longer is
// logic that belongs in a package.
const maxFuncLines = 60

// TestFunctionLength: no function declaration in cmd/pcapsync (tests
// aside) is longer than maxFuncLines, counting its closures with it.
func TestFunctionLength(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > maxFuncLines {
				t.Errorf("%s: %s is %d lines, more than %d: move its logic into a package", name, fd.Name.Name, n, maxFuncLines)
			}
		}
	}
}
