package console

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/layout"
	"github.com/pcapsync/pcapsync/internal/timeline"
)

// TestTimelineReadsNoPackets: the timeline of writeTimelineRoot's
// plain files reads their indexes and statistics and nothing else of
// the data files (index.Open's probes, a read at every block, are
// gone: IndexRead is the indexes' sizes and the statistics' tails),
// and its series equal those built from the whole indexes (index.Open).
func TestTimelineReadsNoPackets(t *testing.T) {
	dir := t.TempDir()
	writeTimelineRoot(t, dir)
	tl, err := BuildTimeline(context.Background(), dir, nil, tlBase, tlBase.Add(20*time.Second), time.Second)
	if err != nil || tl.Coverage.Files != 3 {
		t.Fatalf("timeline: %v, coverage %+v", err, tl.Coverage)
	}
	var sizes, probed int64
	for _, a := range []string{"a", "b"} {
		files, err := layout.AgentFiles(dir, a)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			st, err := os.Stat(index.Path(f.Path))
			if err != nil {
				t.Fatal(err)
			}
			ix, err := index.Open(f.Path)
			if err != nil {
				t.Fatal(err)
			}
			sizes += st.Size()
			probed += ix.Probed
		}
	}
	timeline.OpenIndex = index.Open
	whole, err := BuildTimeline(context.Background(), dir, nil, tlBase, tlBase.Add(20*time.Second), time.Second)
	timeline.OpenIndex = index.OpenSummary
	// The whole indexes' timeline reads the indexes, the statistics'
	// tails and index.Open's probes; the summaries' all that but the
	// probes.
	if want := whole.Coverage.IndexRead - probed; probed == 0 || tl.Coverage.IndexRead != want || want <= sizes {
		t.Errorf("timeline read %d bytes of index and statistics; want %d (the indexes, %d bytes, and the tails; index.Open probes %d more)",
			tl.Coverage.IndexRead, want, sizes, probed)
	}
	js, _ := json.Marshal(tl.Agents)
	jw, _ := json.Marshal(whole.Agents)
	if err != nil || string(js) != string(jw) {
		t.Errorf("the timeline of the summaries differs from that of the whole indexes (%v):\n%s\n%s", err, js, jw)
	}
}
