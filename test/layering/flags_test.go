package layering

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// flagInText is a long flag written in a text ("--snaplen").
var flagInText = regexp.MustCompile(`(^|[^A-Za-z0-9-])--[a-z][a-z0-9-]*`)

// flagHints are the error texts under internal/ that may name a flag:
// runtime hints for the operator of the other end, which cross the
// wire or go to the log as they are, where no program maps a field to
// its flag (file, then a piece of the text).
var flagHints = map[string][]string{
	"internal/collector/server.go": {"this collector plain TCP (--insecure)", "give the agent --tls-ca"},
	"internal/agent/sender.go":     {"check --tls-ca", "check --tls-cert"},
	"internal/wire/errors.go":      {"agent --checksum always"},
	"internal/query/stream.go":     {"raise --reorder-mem"},
}

// TestNoFlagsInErrors: the libraries' errors name their Config's fields
// (internal/fielderr), never a flag: the flags are cmd/pcapsync's, which
// maps each field to its flag when it shows an error. It parses every
// non-test .go file under internal/ (the lab's internal/bench and the
// test helpers aside) and fails on an error made (errors.New,
// fmt.Errorf, fielderr.Errorf) from a text naming a flag, but for the
// hints of flagHints.
func TestNoFlagsInErrors(t *testing.T) {
	root := moduleRoot(t)
	err := filepath.WalkDir(filepath.Join(root, "internal"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() && (rel == "internal/bench" || rel == "internal/testutil" || strings.HasSuffix(rel, "test") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 || !makesError(call) {
				return true
			}
			ast.Inspect(call.Args[0], func(n ast.Node) bool {
				lit, ok := n.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil || !flagInText.MatchString(s) || allowedHint(rel, s) {
					return true
				}
				t.Errorf("%s: error text %q names a flag: name the Config field ({pkg.Path}, internal/fielderr); cmd/pcapsync maps it to the flag", fset.Position(lit.Pos()), s)
				return true
			})
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// makesError reports a call of errors.New, fmt.Errorf or fielderr.Errorf.
func makesError(call *ast.CallExpr) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	x, ok := sel.X.(*ast.Ident)
	if !ok {
		return false
	}
	switch x.Name + "." + sel.Sel.Name {
	case "errors.New", "fmt.Errorf", "fielderr.Errorf":
		return true
	}
	return false
}

func allowedHint(file, text string) bool {
	for _, h := range flagHints[file] {
		if strings.Contains(text, h) {
			return true
		}
	}
	return false
}
