package layout

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
)

// FuzzRetainIndex feeds retention's saved-index parser arbitrary
// documents. Properties, beyond not panicking:
//   - every entry it keeps is valid (validEntry: a data file name of
//     the agent, sizes and times positive, first not after last) and
//     kept under its own name, and kept and dropped entries add up to
//     the document's;
//   - memory stays bounded: no more than maxIndexFiles entries;
//   - a round trip of what it kept parses to the same entries, none
//     dropped.
func FuzzRetainIndex(f *testing.F) {
	valid, _ := json.Marshal(IndexDoc{Version: 1, Files: []IndexedFile{
		{Name: "a1_20261124T090000.000Z.pcapng.zst", Bytes: 12, Mod: 1, First: 5, Last: 9},
		{Name: "a1_20261124T090000.000Z_001.pcapng", Bytes: 1, Mod: 2, First: 5, Last: 5},
	}})
	f.Add(valid)
	f.Add(valid[:len(valid)/2])
	f.Add([]byte(`{"version":1,"files":[{"name":"../../etc/passwd","bytes":1,"mod":1}]}`))
	f.Add([]byte(`{"version":1,"files":[{"name":"a1_20261124T090000.000Z.pcapng","bytes":12,"first":9,"last":5}]}`))
	f.Add([]byte(`{"version":1,"files":[{"name":"mycapture.pcapng","bytes":12,"mod":1}]}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, bad, err := ParseIndex(data, "a1")
		if err != nil {
			return
		}
		var doc IndexDoc
		if json.Unmarshal(data, &doc) != nil {
			t.Fatal("parsed a document json refuses")
		}
		if len(m)+bad != len(doc.Files) || len(m) > maxIndexFiles {
			t.Fatalf("%d kept + %d dropped of %d entries", len(m), bad, len(doc.Files))
		}
		for name, f := range m {
			if name != f.Name || !validEntry("a1", f) {
				t.Fatalf("kept an invalid entry %q: %+v", name, f)
			}
		}
		files := slices.SortedFunc(maps.Values(m), func(a, b IndexedFile) int { return strings.Compare(a.Name, b.Name) })
		b, err := json.Marshal(IndexDoc{Version: 1, Files: files})
		if err != nil {
			t.Fatal(err)
		}
		m2, bad2, err := ParseIndex(b, "a1")
		if err != nil || bad2 != 0 || !maps.Equal(m, m2) {
			t.Fatalf("round trip: %v, %d dropped, equal %v", err, bad2, maps.Equal(m, m2))
		}
	})
}
