package layering

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// TestErrors keeps the errors of every package in one shape. It parses
// each non-test .go file under internal/ and cmd/ (testdata skipped)
// and fails, naming file:line, on:
//
//   - an exported package-level error variable (named ErrX, or set to
//     errors.New or fmt.Errorf) declared outside its package's errors.go:
//     the sentinels callers test with errors.Is are read in one place.
//     Unexported sentinels are the package's own control flow and stay
//     beside their one use;
//   - a package under internal/ that makes errors (errors.New,
//     fmt.Errorf) without an errors.go;
//   - an error text (the first argument of errors.New or fmt.Errorf, a
//     literal or a concatenation starting and ending in one) that starts
//     with a capitalised word ("Bad x"; "TLS x", "PING x" and
//     identifiers such as "Config.Dir" or "KafkaConfig" are fine) or
//     ends in '.', ':', '!' or a newline, since callers wrap it in
//     "context: %w" chains.
//
// Exempt from the errors.go rule only: the packages under
// internal/testutil/ and those named xxxtest (metricstest, redistest,
// pkitest, capturetest, kafkatest). They are helpers for tests and
// benchmarks; their errors go to a test's t.Fatal, no caller tests them
// with errors.Is, so a file of sentinels would be empty.
func TestErrors(t *testing.T) {
	root := moduleRoot(t)
	for _, p := range errorProblems(t, root, []string{"internal", "cmd"}) {
		t.Error(p)
	}
}

// errorProblems walks the directories dirs under root and returns one
// message per violation of TestErrors's rules.
func errorProblems(t *testing.T, root string, dirs []string) []string {
	t.Helper()
	fset := token.NewFileSet()
	type pkg struct {
		hasErrorsGo bool
		firstMake   string // file:line of the first errors.New/fmt.Errorf
	}
	pkgs := map[string]*pkg{}
	var problems []string
	for _, d := range dirs {
		err := filepath.WalkDir(filepath.Join(root, d), func(path string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.IsDir() {
				if e.Name() == "testdata" {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			dir := filepath.Dir(rel)
			p := pkgs[dir]
			if p == nil {
				p = &pkg{}
				pkgs[dir] = p
			}
			if filepath.Base(rel) == "errors.go" {
				p.hasErrorsGo = true
			}
			pos := func(n ast.Node) string {
				return rel + ":" + strconv.Itoa(fset.Position(n.Pos()).Line)
			}
			errorsName, fmtName := importName(f, "errors"), importName(f, "fmt")
			isMake := func(e ast.Expr) bool {
				call, ok := e.(*ast.CallExpr)
				if !ok {
					return false
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return false
				}
				x, ok := sel.X.(*ast.Ident)
				return ok && (x.Name == errorsName && sel.Sel.Name == "New" ||
					x.Name == fmtName && sel.Sel.Name == "Errorf")
			}
			if filepath.Base(rel) != "errors.go" {
				problems = append(problems, sentinelProblems(f, isMake, pos)...)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || !isMake(call) || len(call.Args) == 0 {
					return true
				}
				if p.firstMake == "" {
					p.firstMake = pos(call)
				}
				if why := badErrorText(call.Args[0]); why != "" {
					problems = append(problems, pos(call)+": error text "+why)
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for dir, p := range pkgs {
		if p.firstMake == "" || p.hasErrorsGo || !strings.HasPrefix(dir, "internal/") || helperPackage(dir) {
			continue
		}
		problems = append(problems, p.firstMake+": package "+dir+" makes errors but has no errors.go for its sentinels")
	}
	slices.Sort(problems)
	return problems
}

// sentinelProblems reports f's exported package-level error variables.
func sentinelProblems(f *ast.File, isMake func(ast.Expr) bool, pos func(ast.Node) string) []string {
	var problems []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.VAR {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !name.IsExported() {
					continue
				}
				made := i < len(vs.Values) && isMake(vs.Values[i])
				if made || strings.HasPrefix(name.Name, "Err") {
					problems = append(problems, pos(name)+": sentinel "+name.Name+" belongs in the package's errors.go")
				}
			}
		}
	}
	return problems
}

// helperPackage reports whether dir is a test helper package exempt from
// the errors.go rule (see TestErrors).
func helperPackage(dir string) bool {
	return strings.HasPrefix(dir, "internal/testutil/") || strings.HasSuffix(dir, "test")
}

// importName is the name under which f imports path, "" if it does not.
func importName(f *ast.File, path string) string {
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == path {
			if imp.Name != nil {
				return imp.Name.Name
			}
			return path
		}
	}
	return ""
}

// badErrorText says what is wrong with an error text expression, "" if
// nothing is or it is not made of literals at its ends.
func badErrorText(e ast.Expr) string {
	first, last := e, e
	for {
		b, ok := first.(*ast.BinaryExpr)
		if !ok || b.Op != token.ADD {
			break
		}
		first = b.X
	}
	for {
		b, ok := last.(*ast.BinaryExpr)
		if !ok || b.Op != token.ADD {
			break
		}
		last = b.Y
	}
	if s, ok := stringLit(first); ok {
		if word, bad := capitalised(s); bad {
			return strconv.Quote(s) + " starts with the capitalised word " + strconv.Quote(word) + ": start lowercase"
		}
	}
	if s, ok := stringLit(last); ok {
		if strings.HasSuffix(s, ".") || strings.HasSuffix(s, ":") || strings.HasSuffix(s, "!") || strings.HasSuffix(s, "\n") {
			return strconv.Quote(s) + " ends in punctuation or a newline: drop it"
		}
	}
	return ""
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// capitalised reports whether s starts with a word whose first letter
// is upper case and second lower case, unless the word is an identifier
// (another upper-case letter, a dot or an underscore in it).
func capitalised(s string) (string, bool) {
	word, _, _ := strings.Cut(s, " ")
	r0, n := utf8.DecodeRuneInString(word)
	r1, _ := utf8.DecodeRuneInString(word[n:])
	if !unicode.IsUpper(r0) || !unicode.IsLower(r1) {
		return word, false
	}
	if strings.ContainsAny(word, "._") || strings.IndexFunc(word[n:], unicode.IsUpper) >= 0 {
		return word, false
	}
	return word, true
}

// TestErrorText checks the text rule of TestErrors on examples.
func TestErrorText(t *testing.T) {
	for _, tt := range []struct {
		src string // the first argument of errors.New or fmt.Errorf
		bad bool
	}{
		{`"bad size"`, false},
		{`"Bad size"`, true},
		{`"A size"`, false}, // one letter: an identifier as likely as a word
		{`"TLS with the collector failed"`, false},
		{`"PING answered %q"`, false},
		{`"Config.Dir %q: missing"`, false},
		{`"KafkaConfig.Exe is required"`, false},
		{`"Validate_x failed"`, false},
		{`"size %q is too large."`, true},
		{`"reading:"`, true},
		{`"no!"`, true},
		{`"line\n"`, true},
		{"`raw text.`", true},
		{`"Starting " + name`, true},
		{`name + " ends:"`, true},
		{`"%s: %w"`, false},
		{`msg`, false},
	} {
		e, err := parser.ParseExpr(tt.src)
		if err != nil {
			t.Fatalf("%s: %v", tt.src, err)
		}
		if why := badErrorText(e); (why != "") != tt.bad {
			t.Errorf("badErrorText(%s) = %q, want bad %v", tt.src, why, tt.bad)
		}
	}
}
