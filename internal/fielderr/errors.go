package fielderr

import (
	"fmt"
	"regexp"
	"strings"
)

// keyPattern matches a field named in a format string: {pkg.Path}.
var keyPattern = regexp.MustCompile(`\{([a-z][a-z0-9]*(?:\.[A-Z][A-Za-z0-9]*)+)\}`)

// mark brackets a field's key in the text formatted: the pieces of an
// Error's text and its keys alternate between marks.
const mark = "\x00"

// Key is a field's key ("serve.Tap.MaxConns") given as an argument of
// Errorf instead of written in its format: for a part that names a
// field its caller chose (frontdoor.Share). Formatted by Errorf (%s),
// directly or inside another argument made with fmt, it is a field of
// the Error; anywhere else it is text no reader wants.
type Key string

// Format writes k as Errorf finds it.
func (k Key) Format(f fmt.State, _ rune) { fmt.Fprint(f, mark+string(k)+mark) }

// Error is an error that names fields of a Config. Its text is pieces
// of formatted text with a field between each two.
type Error struct {
	pieces []string // len(keys)+1
	keys   []string
	err    error // what fmt.Errorf made of the format, for Unwrap
}

// Errorf formats like fmt.Errorf (%w wraps), with every {pkg.Path} in
// format, and every Key in a, a field (see the package comment).
func Errorf(format string, a ...any) error {
	f := keyPattern.ReplaceAllStringFunc(format, func(m string) string { return mark + m[1:len(m)-1] + mark })
	err := fmt.Errorf(f, a...)
	parts := strings.Split(err.Error(), mark)
	if len(parts)%2 == 0 { // an argument held a mark of its own
		parts = []string{strings.ReplaceAll(err.Error(), mark, "")}
	}
	e := &Error{err: err}
	for i, p := range parts {
		if i%2 == 0 {
			e.pieces = append(e.pieces, p)
		} else {
			e.keys = append(e.keys, p)
		}
	}
	return e
}

// Error returns the text with each field as its path (SnapLen).
func (e *Error) Error() string { return e.text(Path) }

// Keys returns the fields the error names ("agent.SnapLen"), in order.
func (e *Error) Keys() []string { return append([]string(nil), e.keys...) }

// Unwrap returns the errors format wrapped (%w).
func (e *Error) Unwrap() []error {
	switch u := e.err.(type) {
	case interface{ Unwrap() []error }:
		return u.Unwrap()
	case interface{ Unwrap() error }:
		return []error{u.Unwrap()}
	}
	return nil
}

func (e *Error) text(name func(key string) string) string {
	var b strings.Builder
	b.WriteString(e.pieces[0])
	for i, k := range e.keys {
		b.WriteString(name(k))
		b.WriteString(e.pieces[i+1])
	}
	return b.String()
}

// Path is the name Error gives a field: its key without the package
// ("agent.SnapLen" is "SnapLen").
func Path(key string) string {
	_, p, _ := strings.Cut(key, ".")
	return p
}

// Render returns err's text with every field of every Error in its
// tree (Unwrap) named by name; where name returns "", by its path.
// Errors that wrap an Error with %w (fmt.Errorf, errors.Join) show it
// rendered; an error that formats one with %v or %s does not.
func Render(err error, name func(key string) string) string {
	if err == nil {
		return ""
	}
	named := func(k string) string {
		if n := name(k); n != "" {
			return n
		}
		return Path(k)
	}
	s := err.Error()
	if fe, ok := err.(*Error); ok {
		s = fe.text(named)
	}
	var children []error
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		children = u.Unwrap()
	case interface{ Unwrap() error }:
		children = []error{u.Unwrap()}
	}
	for _, c := range children {
		if c == nil {
			continue
		}
		if plain, r := c.Error(), Render(c, name); r != plain {
			s = strings.Replace(s, plain, r, 1)
		}
	}
	return s
}
