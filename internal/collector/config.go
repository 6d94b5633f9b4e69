package collector

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/pcapsync/pcapsync/internal/wire"
)

// Config configures a Collector. The zero value of every field but Dir
// means its default.
type Config struct {
	// Dir is the output root; each agent writes below Dir/<name>/.
	Dir string
	// RotateSize closes a file once it holds at least this many bytes
	// (checked between batches, so a file may exceed it by one batch).
	// 0 means 1 GiB; negative disables size rotation.
	RotateSize int64
	// RotateInterval rotates files at wall-clock multiples of the
	// interval in UTC (1h turns over at the top of every hour).
	// 0 means 1h; negative disables time rotation.
	RotateInterval time.Duration
	// IdleClose closes an agent's file this long after its connection
	// was lost without a clean goodbye, so that a quick reconnect
	// continues the same file. 0 means 1m.
	IdleClose time.Duration
	// Fsync is the sync policy: a positive interval syncs open files that
	// often in the background (an acknowledgement then means written to
	// the OS, which survives a collector crash; an OS crash can lose up to
	// the interval); FsyncPerBatch syncs before every acknowledgement;
	// FsyncNever leaves it to the OS. Closed files are always synced
	// except under FsyncNever. 0 means 1s.
	Fsync time.Duration
	// MaxFrame is the largest frame payload accepted. 0 means 16 MiB.
	MaxFrame uint32
	// HandshakeTimeout bounds the time from accept to a valid Hello.
	// 0 means 10s.
	HandshakeTimeout time.Duration
	// ShutdownTimeout bounds how long Shutdown waits for sessions to
	// commit and close. 0 means 10s.
	ShutdownTimeout time.Duration
	// Logger receives events (never one line per packet). nil means
	// slog.Default().
	Logger *slog.Logger
}

func (c *Config) withDefaults() Config {
	d := *c
	if d.RotateSize == 0 {
		d.RotateSize = 1 << 30
	}
	if d.RotateInterval == 0 {
		d.RotateInterval = time.Hour
	}
	if d.Fsync == 0 {
		d.Fsync = time.Second
	}
	if d.IdleClose == 0 {
		d.IdleClose = time.Minute
	}
	if d.MaxFrame == 0 {
		d.MaxFrame = wire.DefaultMaxFrame
	}
	if d.HandshakeTimeout == 0 {
		d.HandshakeTimeout = 10 * time.Second
	}
	if d.ShutdownTimeout == 0 {
		d.ShutdownTimeout = 10 * time.Second
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	return d
}

// Validate reports the first unusable setting.
func (c *Config) Validate() error {
	switch {
	case c.Dir == "":
		return errors.New("collector: output directory is required")
	case c.RotateSize > 0 && c.RotateSize < 4096:
		return fmt.Errorf("collector: rotate size %d bytes is below the minimum of 4096", c.RotateSize)
	case c.RotateInterval > 0 && c.RotateInterval < time.Second:
		return fmt.Errorf("collector: rotate interval %s is below the minimum of 1s", c.RotateInterval)
	case c.MaxFrame != 0 && (c.MaxFrame < 64<<10 || c.MaxFrame > 1<<30):
		return fmt.Errorf("collector: max frame %d bytes out of range 64KiB..1GiB", c.MaxFrame)
	case c.Fsync < 0 && c.Fsync != FsyncPerBatch && c.Fsync != FsyncNever:
		return fmt.Errorf("collector: fsync policy %s: want a positive interval, FsyncPerBatch or FsyncNever", c.Fsync)
	case c.HandshakeTimeout < 0 || c.ShutdownTimeout < 0 || c.IdleClose < 0:
		return errors.New("collector: timeouts must not be negative")
	}
	return nil
}
