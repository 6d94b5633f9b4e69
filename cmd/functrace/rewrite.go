package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"strings"
)

// importPath is the package whose Trace the rewriter injects.
const importPath = "github.com/pcapsync/pcapsync/internal/functrace"

// rewrite returns src with "defer functrace.Trace()()" injected as the
// first statement of every function declaration and method with a body
// (or, with remove, with those first statements and then the unused
// import taken out), formatted with go/format, and whether it differs
// from src. Function literals are left alone, and so are functions marked
// //go:nosplit (a defer does not fit their stack limit), generated files
// ("// Code generated ... DO NOT EDIT.") and the functrace package
// itself; a file with nothing to change is returned as it is, not
// reformatted.
//
// The edits are made in the text, at offsets the parser found, so that
// comments and the layout around them stay where they were; go/format
// then fixes indentation and sorts the import into its group.
func rewrite(filename string, src []byte, remove bool) ([]byte, bool, error) {
	r, err := parse(filename, src)
	if err != nil || r == nil {
		return src, false, err
	}
	name, imported := r.localName()
	if name == "_" || name == "." {
		return nil, false, fmt.Errorf("%s: %s is imported as %s", filename, importPath, name)
	}
	if remove {
		if !imported {
			return src, false, nil
		}
		r.remove(name)
	} else {
		r.inject(name, imported)
	}
	if len(r.edits) == 0 {
		return src, false, nil
	}
	out, err := r.format()
	if err == nil && len(r.oneLiners) > 0 {
		out, err = markSplit(filename, out, r.oneLiners)
	}
	if err != nil {
		return nil, false, err
	}
	return out, !bytes.Equal(out, src), nil
}

// oneLineMark follows the injected call in a function that was written
// on one line and that go/format split because the call made it too
// long, so that -remove can join it again.
const oneLineMark = "// functrace:oneline"

// markSplit marks the functions of src, at the given indexes in its
// function declarations, that are no longer on one line.
func markSplit(filename string, src []byte, decls []int) ([]byte, error) {
	r, err := parse(filename, src)
	if err != nil {
		return nil, err
	}
	fns := r.funcs()
	for _, i := range decls {
		fn := fns[i]
		if !r.sameLine(r.off(fn.Body.Lbrace), r.off(fn.Body.Rbrace)) {
			r.insert(r.off(fn.Body.List[0].End()), " "+oneLineMark)
		}
	}
	if len(r.edits) == 0 {
		return src, nil
	}
	return r.format()
}

// parse returns a rewriter for src, or nil for a file not to touch.
func parse(filename string, src []byte) (*rewriter, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filename, src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	if ast.IsGenerated(f) || f.Name.Name == "functrace" {
		return nil, nil
	}
	return &rewriter{src: src, tf: fset.File(f.Pos()), f: f, name: filename}, nil
}

// format returns the source with the edits made, formatted.
func (r *rewriter) format() ([]byte, error) {
	out, err := format.Source(r.apply())
	if err != nil {
		return nil, fmt.Errorf("%s: formatting the rewritten source: %w", r.name, err)
	}
	return out, nil
}

// An edit replaces src[off:end] with text.
type edit struct {
	off, end int
	text     string
}

type rewriter struct {
	name  string // of the file, for errors
	src   []byte
	tf    *token.File
	f     *ast.File
	edits []edit
	// oneLiners are the indexes in funcs() of the functions written on
	// one line that inject gave a call (the rewrite adds and removes no
	// function, so they hold in the output too).
	oneLiners []int
}

func (r *rewriter) off(p token.Pos) int { return r.tf.Offset(p) }

// funcs returns the file's function declarations, in order.
func (r *rewriter) funcs() []*ast.FuncDecl {
	var fns []*ast.FuncDecl
	for _, d := range r.f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok {
			fns = append(fns, fn)
		}
	}
	return fns
}

// localName is the name the file knows the functrace package by.
func (r *rewriter) localName() (name string, imported bool) {
	for _, s := range r.f.Imports {
		if p, err := strconv.Unquote(s.Path.Value); err != nil || p != importPath {
			continue
		}
		if s.Name != nil {
			return s.Name.Name, true
		}
		return "functrace", true
	}
	return "functrace", false
}

// traced reports whether fn's first statement is "defer name.Trace()()".
func traced(fn *ast.FuncDecl, name string) bool {
	return len(fn.Body.List) > 0 && isTrace(fn.Body.List[0], name)
}

func isTrace(s ast.Stmt, name string) bool {
	d, ok := s.(*ast.DeferStmt)
	if !ok || len(d.Call.Args) != 0 {
		return false
	}
	inner, ok := d.Call.Fun.(*ast.CallExpr)
	if !ok || len(inner.Args) != 0 {
		return false
	}
	sel, ok := inner.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "Trace" {
		return false
	}
	x, ok := sel.X.(*ast.Ident)
	return ok && x.Name == name
}

// instrumentable reports whether fn may get a trace call.
func instrumentable(fn *ast.FuncDecl) bool {
	if fn.Body == nil {
		return false
	}
	if fn.Doc != nil {
		for _, c := range fn.Doc.List {
			if strings.HasPrefix(c.Text, "//go:nosplit") {
				return false
			}
		}
	}
	return true
}

func (r *rewriter) inject(name string, imported bool) {
	call := "defer " + name + ".Trace()()"
	for i, fn := range r.funcs() {
		if !instrumentable(fn) || traced(fn, name) {
			continue
		}
		lb, rb := r.off(fn.Body.Lbrace), r.off(fn.Body.Rbrace)
		if r.sameLine(lb, rb) {
			r.oneLiners = append(r.oneLiners, i)
		}
		switch {
		case r.sameLine(lb, rb) && len(fn.Body.List) == 0:
			r.insert(lb+1, " "+call+" ")
		case r.sameLine(lb, rb):
			r.insert(lb+1, " "+call+";")
		default:
			// After a comment on the brace's line, if any, so that it
			// stays on that line.
			if rest := bytes.TrimSpace(r.src[lb+1 : r.lineEnd(lb)]); len(rest) == 0 || bytes.HasPrefix(rest, []byte("//")) {
				r.insert(r.lineEnd(lb), "\n"+call)
			} else {
				r.insert(lb+1, "\n"+call+"\n")
			}
		}
	}
	if len(r.edits) == 0 || imported {
		return
	}
	spec := strconv.Quote(importPath)
	for _, d := range r.f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.IMPORT {
			continue
		}
		if !g.Lparen.IsValid() {
			r.insert(r.lineEnd(r.off(g.End())), "\nimport "+spec)
			return
		}
		// Last in the block, so that go/format sorts it into the last
		// group (this module's and other modules' packages).
		rp := r.off(g.Rparen)
		if ls := r.lineStart(rp); len(bytes.TrimSpace(r.src[ls:rp])) == 0 {
			r.insert(ls, "\t"+spec+"\n")
		} else {
			r.insert(rp, "\n\t"+spec+"\n")
		}
		return
	}
	r.insert(r.lineEnd(r.off(r.f.Name.End())), "\n\nimport "+spec)
}

func (r *rewriter) remove(name string) {
	removed := 0
	for _, fn := range r.funcs() {
		if fn.Body == nil || !traced(fn, name) {
			continue
		}
		s, e := r.off(fn.Body.List[0].Pos()), r.off(fn.Body.List[0].End())
		if mark := r.markAfter(e); mark > e {
			if !r.join(fn) {
				r.deleteLines(s, mark)
			}
		} else if !r.deleteLines(s, e) {
			// On the brace's line: take the semicolon after it too.
			for e < len(r.src) && (r.src[e] == ' ' || r.src[e] == '\t') {
				e++
			}
			if e < len(r.src) && r.src[e] == ';' {
				e++
			}
			r.edits = append(r.edits, edit{off: s, end: e})
		}
		removed++
	}
	if removed == 0 || r.uses(name) > removed {
		return
	}
	for _, d := range r.f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.IMPORT {
			continue
		}
		for _, s := range g.Specs {
			is := s.(*ast.ImportSpec)
			if p, _ := strconv.Unquote(is.Path.Value); p != importPath {
				continue
			}
			var n ast.Node = is
			if len(g.Specs) == 1 {
				n = g
			}
			if !r.deleteLines(r.off(n.Pos()), r.off(n.End())) {
				r.edits = append(r.edits, edit{off: r.off(n.Pos()), end: r.off(n.End())})
			}
			return
		}
	}
}

// markAfter returns the end of oneLineMark if it follows src[:e] on the
// same line, else e.
func (r *rewriter) markAfter(e int) int {
	rest := r.src[e:r.lineEnd(e)]
	if string(bytes.TrimSpace(rest)) == oneLineMark {
		return e + len(bytes.TrimRight(rest, " \t"))
	}
	return e
}

// join replaces fn's body, a marked call and then statements one a line
// without comments, by those statements on one line, and reports
// whether it could.
func (r *rewriter) join(fn *ast.FuncDecl) bool {
	lb, rb := r.off(fn.Body.Lbrace), r.off(fn.Body.Rbrace)
	for _, c := range r.f.Comments {
		if o := r.off(c.Pos()); lb < o && o < rb && c.Text() != strings.TrimPrefix(oneLineMark, "// ")+"\n" {
			return false
		}
	}
	var stmts []string
	for _, st := range fn.Body.List[1:] {
		s, e := r.off(st.Pos()), r.off(st.End())
		if !r.sameLine(s, e) {
			return false
		}
		stmts = append(stmts, string(r.src[s:e]))
	}
	text := ""
	if len(stmts) > 0 {
		text = " " + strings.Join(stmts, "; ") + " "
	}
	r.edits = append(r.edits, edit{off: lb + 1, end: rb, text: text})
	return true
}

// uses counts the selectors name.X in the file.
func (r *rewriter) uses(name string) int {
	n := 0
	ast.Inspect(r.f, func(node ast.Node) bool {
		if sel, ok := node.(*ast.SelectorExpr); ok {
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == name {
				n++
			}
		}
		return true
	})
	return n
}

// deleteLines deletes the lines holding src[s:e] if nothing but blanks
// share them, and reports whether it did.
func (r *rewriter) deleteLines(s, e int) bool {
	ls, le := r.lineStart(s), r.lineEnd(e)
	if len(bytes.TrimSpace(r.src[ls:s])) != 0 || len(bytes.TrimSpace(r.src[e:le])) != 0 {
		return false
	}
	if le < len(r.src) {
		le++ // the newline
	}
	r.edits = append(r.edits, edit{off: ls, end: le})
	return true
}

func (r *rewriter) insert(off int, text string) {
	r.edits = append(r.edits, edit{off: off, end: off, text: text})
}

func (r *rewriter) sameLine(a, b int) bool { return bytes.IndexByte(r.src[a:b], '\n') < 0 }

// lineStart is the offset of the start of the line holding off.
func (r *rewriter) lineStart(off int) int { return bytes.LastIndexByte(r.src[:off], '\n') + 1 }

// lineEnd is the offset of the newline ending the line holding off, or
// len(src).
func (r *rewriter) lineEnd(off int) int {
	if i := bytes.IndexByte(r.src[off:], '\n'); i >= 0 {
		return off + i
	}
	return len(r.src)
}

// apply returns src with the edits made; they do not overlap.
func (r *rewriter) apply() []byte {
	slices.SortStableFunc(r.edits, func(a, b edit) int { return a.off - b.off })
	out := make([]byte, 0, len(r.src)+64*len(r.edits))
	last := 0
	for _, e := range r.edits {
		out = append(out, r.src[last:e.off]...)
		out = append(out, e.text...)
		last = e.end
	}
	return append(out, r.src[last:]...)
}
