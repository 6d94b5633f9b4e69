// Package p has no imports.
package p // the package clause's comment

// T is a type with methods.
type T struct{ n int }

// Get returns the count.
func (t *T) Get() int {
	// A comment first in the body.
	return t.n
}

func (t T) Short() int { return t.n }

func empty() {}

func emptyLines() {
}

func braceComment() { // a comment on the brace's line
	println("x")
}

// Map is generic.
func Map[S ~[]E, E any](s S, f func(E) E) S {
	out := make(S, 0, len(s))
	for _, e := range s {
		out = append(out, f(e))
	}
	g := func() { println("a literal is not traced") }
	g()
	return out
}

// Pair is a generic type.
type Pair[K comparable, V any] struct {
	k K
	v V
}

// Key is a method of a generic type.
func (p Pair[K, V]) Key() K {
	return p.k
}

//go:nosplit
func fast() int {
	return 1
}

func declared() int

func (t *T) aLongerNameThanFitsOnOneLineWithTheCall(first, second int) int { return first + t.n }

func (t *T) anotherLongNameThatStopsFittingOnOneLineWithTheTraceCall(first, second int) {}

func (t *T) twoStatementsThatDoNotFitOnOneLineWithTheCall(first int) int { first++; return first }
