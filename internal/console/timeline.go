package console

import "github.com/pcapsync/pcapsync/internal/timeline"

// The timeline is built by package timeline (the query listener's GET
// /timeline serves the same); these are its names as the console's
// tests and callers knew them.
type (
	Series           = timeline.Series
	TimelineCoverage = timeline.TimelineCoverage
	Timeline         = timeline.Timeline
)

// MaxPoints bounds the intervals of a timeline (timeline.MaxPoints).
const MaxPoints = timeline.MaxPoints

// BuildTimeline is timeline.BuildTimeline.
var BuildTimeline = timeline.BuildTimeline
