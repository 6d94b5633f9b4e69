package federate

import (
	"errors"
	"time"

	"github.com/pcapsync/pcapsync/internal/fielderr"
	"github.com/pcapsync/pcapsync/internal/queryhttp"
)

// DefaultServerTimeout is Config.Timeout's default: how long a server
// may send nothing before it is given up.
const DefaultServerTimeout = 30 * time.Second

// MaxInterfaces bounds the interfaces one server's stream may describe.
const MaxInterfaces = 16384

// MaxInterfaceBytes bounds the bytes of the interface names and
// descriptions of one server's stream.
const MaxInterfaceBytes = 4 << 20

// MaxStatsBytes bounds the statistics blocks kept for the end of the
// output, all servers together; those beyond are dropped and counted
// (Result.StatsDropped).
const MaxStatsBytes = 4 << 20

// Config is one federated query.
type Config struct {
	// Servers are the servers asked, in order (ties between them go by
	// it): each ClientConfig's Addr names its server, and all carry the
	// same Params (queryhttp.Params: the selection, Count and MaxBytes
	// are sent to every server). At least one.
	Servers []queryhttp.ClientConfig
	// Timeout is the stall deadline of each server (the package doc);
	// 0 means DefaultServerTimeout.
	Timeout time.Duration
	// Partial answers from the servers that answered when others
	// failed (Result.Partial), instead of failing the query.
	Partial bool
	// Count and MaxBytes bound the merged output as the local query's
	// Config.Count and Config.MaxBytes do; 0: no limit.
	Count, MaxBytes int64
	// Query is the query in words, for the section comment ("pcapsync
	// query --since ..."); empty: "pcapsync query".
	Query string
}

// Validate checks c.
func (c Config) Validate() error {
	var errs []error
	if len(c.Servers) == 0 {
		errs = append(errs, fielderr.Errorf("no server to ask ({federate.Servers})"))
	}
	if c.Timeout < 0 {
		errs = append(errs, fielderr.Errorf("{federate.Timeout} %s is negative", c.Timeout))
	}
	if c.Count < 0 || c.MaxBytes < 0 {
		errs = append(errs, fielderr.Errorf("{federate.Count} and {federate.MaxBytes} are 0 (no limit) or more"))
	}
	return errors.Join(errs...)
}

func (c Config) timeout() time.Duration {
	if c.Timeout == 0 {
		return DefaultServerTimeout
	}
	return c.Timeout
}
