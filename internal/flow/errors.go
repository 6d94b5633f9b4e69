package flow

import "errors"

// ErrDamaged: a flow file is not one this package wrote, or was changed
// since (a checksum, a length or a field does not verify). The records
// before the damage are still returned by Parse.
var ErrDamaged = errors.New("flow file damaged")

// ErrVersion: a flow file has a version this package does not read.
var ErrVersion = errors.New("unknown flow file version")

// ErrConfig: a Config field is out of range (see Config.Validate).
var ErrConfig = errors.New("invalid flow table config")
