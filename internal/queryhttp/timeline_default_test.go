package queryhttp

import (
	"net/url"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/timeline"
)

// TestParseTimelineDefault: without since, until and step, the range is
// the day before now ending at the end of now's step, both ends on
// whole steps and whole bins of the timeline summaries: the default
// view is read from them. Given ones are kept as given.
func TestParseTimelineDefault(t *testing.T) {
	now := time.Date(2026, 3, 1, 10, 17, 23, 456, time.UTC)
	_, since, until, step, err := ParseTimeline(url.Values{}, t.TempDir(), now)
	if err != nil {
		t.Fatal(err)
	}
	want := time.Date(2026, 3, 1, 10, 18, 0, 0, time.UTC)
	if !until.Equal(want) || until.Sub(since) != timeline.DefaultTimelineRange || step != time.Minute ||
		since.UnixNano()%index.BinWidth != 0 {
		t.Fatalf("default range %v..%v by %v, want ..%v by 1m", since, until, step, want)
	}
	_, since, until, _, err = ParseTimeline(url.Values{"step": {"70s"}}, t.TempDir(), now)
	if err != nil || !until.Equal(now) || !since.Equal(now.Add(-timeline.DefaultTimelineRange)) {
		t.Fatalf("with a step: %v..%v, %v", since, until, err)
	}
}
