package retention

import "errors"

// errNoPackets: a closed data file read for its packets' times holds no
// whole packet block; its modification time stands in for them.
var errNoPackets = errors.New("no packet block")
