package store

import "github.com/pcapsync/pcapsync/internal/layout"

// The names of the root that readers share with the Store are defined
// by internal/layout; these are the same constants, for the Store's
// callers.
const (
	PartSuffix = layout.PartSuffix // see layout.PartSuffix
	RetainDir  = layout.RetainDir  // see layout.RetainDir
)
