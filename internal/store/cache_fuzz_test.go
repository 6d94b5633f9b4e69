package store

import (
	"encoding/hex"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
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
	valid, _ := json.Marshal(indexDoc{Version: 1, Files: []retFile{
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
		m, bad, err := parseIndex(data, "a1")
		if err != nil {
			return
		}
		var doc indexDoc
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
		files := slices.SortedFunc(maps.Values(m), fileOrder)
		b, err := json.Marshal(indexDoc{Version: 1, Files: files})
		if err != nil {
			t.Fatal(err)
		}
		m2, bad2, err := parseIndex(b, "a1")
		if err != nil || bad2 != 0 || !maps.Equal(m, m2) {
			t.Fatalf("round trip: %v, %d dropped, equal %v", err, bad2, maps.Equal(m, m2))
		}
	})
}

// FuzzStateFile feeds the state file parser (StateFile, and an agent's
// state file) arbitrary documents. Properties, beyond not panicking:
//   - every mark it returns has a valid agent name (that of the agent
//     whose state file it is), and no instance comes twice;
//   - memory stays bounded: no more than maxStateInstances marks;
//   - a round trip of the marks parses to the same marks.
func FuzzStateFile(f *testing.F) {
	id := strings.Repeat("ab", 16)
	valid, _ := json.Marshal(stateDoc{Version: 1, Instances: []stateEntry{
		{Instance: id, Name: "a1", LastSeq: 7, Seen: time.Date(2026, 11, 27, 1, 2, 3, 4, time.UTC)},
		{Instance: strings.Repeat("cd", 16), Name: "a1", LastSeq: 1 << 63},
	}})
	f.Add(byte(0), valid)
	f.Add(byte(1), valid)
	f.Add(byte(0), valid[:len(valid)/2])
	f.Add(byte(0), []byte(`{"version":1,"instances":[{"instance":"`+id+`ab","name":"a1","last_seq":1}]}`)) // 17 bytes
	f.Add(byte(0), []byte(`{"version":1,"instances":[{"instance":"`+id+`","name":"a1"},{"instance":"`+id+`","name":"a1"}]}`))
	f.Add(byte(0), []byte(`{"version":1,"instances":[{"instance":"`+id+`","name":"../x"}]}`))
	f.Add(byte(0), []byte{})
	f.Fuzz(func(t *testing.T, which byte, data []byte) {
		agent := []string{"", "a1"}[which%2]
		marks, err := parseState(data, agent)
		if err != nil {
			return
		}
		if len(marks) > maxStateInstances {
			t.Fatalf("%d marks", len(marks))
		}
		doc := stateDoc{Version: 1}
		seen := map[[16]byte]bool{}
		for _, m := range marks {
			if seen[m.id] || agent != "" && m.name != agent || len(m.name) == 0 {
				t.Fatalf("invalid mark %+v", m)
			}
			seen[m.id] = true
			doc.Instances = append(doc.Instances, stateEntry{Instance: hex.EncodeToString(m.id[:]), Name: m.name, LastSeq: m.seq, Seen: m.seen})
		}
		b, err := json.Marshal(&doc)
		if err != nil {
			return // a time json cannot write (a year past 9999): never saved so
		}
		again, err := parseState(b, agent)
		if err != nil || len(again) != len(marks) {
			t.Fatalf("round trip: %v, %d marks of %d", err, len(again), len(marks))
		}
		for i := range marks {
			a, b := marks[i], again[i]
			if a.id != b.id || a.name != b.name || a.seq != b.seq || !a.seen.Equal(b.seen) {
				t.Fatalf("round trip: %+v, want %+v", b, a)
			}
		}
	})
}
