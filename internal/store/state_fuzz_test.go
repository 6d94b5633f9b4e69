package store

import (
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

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
