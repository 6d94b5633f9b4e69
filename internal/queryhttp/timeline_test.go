package queryhttp

import (
	"context"
	"errors"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/timeline"
)

// TestTimeline: GET /timeline answers the timeline that
// timeline.BuildTimeline makes of the root (the console's), behind the
// query's front door (the token required); a bad parameter is a 400
// naming it.
func TestTimeline(t *testing.T) {
	dir := writeFixture(t, 50, "web1", "db1")
	srv := startServer(t, Config{Listen: "127.0.0.1:0", Dir: dir, Token: "s3cret"})
	ctx := context.Background()
	since := time.Unix(0, base).UTC()
	until := since.Add(2 * time.Second)
	v := url.Values{"since": {since.Format(time.RFC3339Nano)}, "until": {until.Format(time.RFC3339Nano)}, "step": {"100ms"}}
	got, err := FetchTimeline(ctx, ClientConfig{Addr: srv.Addr(), Token: "s3cret"}, v)
	if err != nil {
		t.Fatal(err)
	}
	want, err := timeline.BuildTimeline(ctx, dir, nil, since, until, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) || len(got.Agents) != 2 || got.Points != 20 {
		t.Errorf("GET /timeline %+v, want %+v", got, want)
	}
	if _, err := FetchTimeline(ctx, ClientConfig{Addr: srv.Addr()}, v); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "token required") {
		t.Errorf("without the token: %v, want refused", err)
	}
	for _, bad := range []string{"step=1ns", "since=tomorrow-ish", "count=3", "agent=../x", "since=2026-01-02&until=2026-01-01"} {
		q, _ := url.ParseQuery(bad)
		if _, err := FetchTimeline(ctx, ClientConfig{Addr: srv.Addr(), Token: "s3cret"}, q); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: %v, want a 400", bad, err)
		}
	}
}

// TestMarkers: GET /markers answers the markers timeline.BuildMarkers
// makes of the root and timeline.StatusMarkers of the status, by time
// (the console's GET /api/markers), behind the front door; a bad
// parameter is a 400.
func TestMarkers(t *testing.T) {
	dir := writeFiles(t, 4<<10, 200, "web1", "db1")
	connected := time.Unix(0, base).Add(time.Second).UTC()
	status := map[string]any{"agents": []map[string]any{{"name": "web1", "connected_since": connected, "address": "192.0.2.1:5000"}}}
	srv := startServer(t, Config{Listen: "127.0.0.1:0", Dir: dir, Token: "s3cret", Status: func() any { return status }})
	ctx := context.Background()
	since, until := time.Unix(0, base).Add(-time.Second).UTC(), time.Unix(0, base).Add(10*time.Second).UTC()
	v := url.Values{"since": {since.Format(time.RFC3339Nano)}, "until": {until.Format(time.RFC3339Nano)}, "step": {"10ms"}}
	got, err := FetchMarkers(ctx, ClientConfig{Addr: srv.Addr(), Token: "s3cret"}, v)
	if err != nil {
		t.Fatal(err)
	}
	want, err := timeline.BuildMarkers(ctx, dir, nil, since, until, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	want.Markers = append(want.Markers, timeline.StatusMarkers(status, nil, since, until)...)
	timeline.SortMarkers(want.Markers)
	if !reflect.DeepEqual(got, want) || len(got.Markers) < 3 {
		t.Errorf("GET /markers %+v, want %+v (a stop of each agent and web1's connect)", got, want)
	}
	if _, err := FetchMarkers(ctx, ClientConfig{Addr: srv.Addr()}, v); !errors.Is(err, ErrRefused) {
		t.Errorf("without the token: %v, want refused", err)
	}
	for _, bad := range []string{"step=1ns", "since=tomorrow-ish", "community_id=1:x", "agent=../x", "since=2026-01-02&until=2026-01-01"} {
		q, _ := url.ParseQuery(bad)
		if _, err := FetchMarkers(ctx, ClientConfig{Addr: srv.Addr(), Token: "s3cret"}, q); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: %v, want a 400", bad, err)
		}
	}
}
