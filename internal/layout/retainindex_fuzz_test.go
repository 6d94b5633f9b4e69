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
//   - a record of removals kept is Valid, and one dropped counts in
//     the entries dropped;
//   - a round trip of what it kept parses to the same entries and
//     record, none dropped.
func FuzzRetainIndex(f *testing.F) {
	valid, _ := json.Marshal(IndexDoc{Version: 1, Files: []IndexedFile{
		{Name: "a1_20261124T090000.000Z.pcapng.zst", Bytes: 12, Mod: 1, First: 5, Last: 9},
		{Name: "a1_20261124T090000.000Z_001.pcapng", Bytes: 1, Mod: 2, First: 5, Last: 5},
	}, Removed: &Removed{Files: 3, Bytes: 300, From: 1, Through: 4}})
	f.Add(valid)
	f.Add(valid[:len(valid)/2])
	f.Add([]byte(`{"version":1,"files":[{"name":"../../etc/passwd","bytes":1,"mod":1}]}`))
	f.Add([]byte(`{"version":1,"files":[{"name":"a1_20261124T090000.000Z.pcapng","bytes":12,"first":9,"last":5}]}`))
	f.Add([]byte(`{"version":1,"files":[{"name":"mycapture.pcapng","bytes":12,"mod":1}]}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`{"version":1,"files":[],"removed":{"files":-1,"bytes":5,"from":9,"through":5}}`))
	f.Add([]byte(`{"version":1,"files":[],"removed":{"files":0,"bytes":5}}`))
	f.Add([]byte(`{"version":1,"files":[],"removed":null}`))
	f.Add([]byte(`{"version":1,"files":[],"removed":[1]}`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		ix, bad, err := ParseIndexDoc(data, "a1")
		if err != nil {
			return
		}
		m := ix.Files
		var doc IndexDoc
		if json.Unmarshal(data, &doc) != nil {
			t.Fatal("parsed a document json refuses")
		}
		entries := len(doc.Files)
		if doc.Removed != nil {
			entries++
			if ix.Removed == (Removed{}) && doc.Removed.Valid() && *doc.Removed != (Removed{}) {
				t.Fatalf("dropped a valid record of removals %+v", *doc.Removed)
			}
		}
		if !ix.Removed.Valid() {
			t.Fatalf("kept an invalid record of removals %+v", ix.Removed)
		}
		kept := len(m)
		if doc.Removed != nil && (ix.Removed != Removed{} || *doc.Removed == Removed{}) {
			kept++
		}
		if kept+bad != entries || len(m) > maxIndexFiles {
			t.Fatalf("%d kept + %d dropped of %d entries", kept, bad, entries)
		}
		for name, f := range m {
			if name != f.Name || !validEntry("a1", f) {
				t.Fatalf("kept an invalid entry %q: %+v", name, f)
			}
		}
		files := slices.SortedFunc(maps.Values(m), func(a, b IndexedFile) int { return strings.Compare(a.Name, b.Name) })
		var rem *Removed
		if ix.Removed != (Removed{}) {
			rem = &ix.Removed
		}
		b, err := json.Marshal(IndexDoc{Version: 1, Files: files, Removed: rem})
		if err != nil {
			t.Fatal(err)
		}
		ix2, bad2, err := ParseIndexDoc(b, "a1")
		if err != nil || bad2 != 0 || !maps.Equal(m, ix2.Files) || ix2.Removed != ix.Removed {
			t.Fatalf("round trip: %v, %d dropped, equal %v, removed %+v vs %+v", err, bad2, maps.Equal(m, ix2.Files), ix2.Removed, ix.Removed)
		}
	})
}
