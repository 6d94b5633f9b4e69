package timeline

import "testing"

// FuzzParseISBs: a file's tail is hostile; parseISBs never panics and
// takes no more blocks than the bytes can hold.
func FuzzParseISBs(f *testing.F) {
	isb := []byte{5, 0, 0, 0, 44, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 7, 0, 8, 0, 9, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0xff, 0xff, 0, 0, 0, 0, 44, 0, 0, 0}
	f.Add(isb)
	f.Add(isb[:30])
	f.Add(append(append([]byte{}, isb...), isb...))
	f.Fuzz(func(t *testing.T, b []byte) {
		if got := parseISBs(b); len(got) > len(b)/28 {
			t.Errorf("%d blocks of %d bytes", len(got), len(b))
		}
	})
}
