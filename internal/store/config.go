package store

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/flow"
	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/observe"
)

// Config configures a Store. The zero value of every field but Dir
// means its default.
type Config struct {
	// Dir is the output root; each agent's files go below Dir/<name>/.
	Dir string
	// RotateSize closes a file once it holds at least this many bytes
	// (checked between batches, so a file may exceed it by one batch).
	// 0 means DefaultRotateSize; negative disables size rotation.
	RotateSize int64
	// RotateInterval rotates files at wall-clock multiples of the
	// interval in UTC (1h turns over at the top of every hour).
	// 0 means DefaultRotateInterval; negative disables time rotation.
	RotateInterval time.Duration
	// IdleClose closes an agent's file this long after Writer.Linger
	// (its connection was lost without a clean goodbye), so that a quick
	// reconnect continues the same file. 0 means DefaultIdleClose.
	IdleClose time.Duration
	// Fsync is the sync policy: a positive interval syncs open files that
	// often in the background (a Commit then means written to the OS,
	// which survives a crash of the process; an OS crash can lose up to
	// the interval); FsyncPerBatch syncs in every Commit; FsyncNever
	// leaves it to the OS. Closed files are always synced except under
	// FsyncNever. 0 means DefaultFsync.
	Fsync time.Duration
	// FileCompress compresses the files written: a codec compress.Files
	// allows (see filecompress.go); the zero value writes plain pcapng.
	FileCompress compress.Spec
	// ZstdFrames is how a zstd file is cut into frames (filecompress.go):
	// the zero value, ZstdFramePerFile, writes one frame per file, which
	// every zstd reader reads whole; ZstdFramePerBlock ends a frame at
	// every block of the index, so that a query decodes only the blocks
	// it selects. Only with zstd FileCompress.
	ZstdFrames ZstdFrames
	// MaxOpenFiles bounds the agent files open at once: beyond it, the
	// least recently written file (or, when every file is in use, one
	// at random) is closed, kept .part with its marks, and reopened for
	// append when its agent writes again (see budget.go). 0 means
	// DefaultMaxOpenFiles of the process's RLIMIT_NOFILE at Open;
	// negative means no budget.
	MaxOpenFiles int
	// Logger receives events (never one line per packet). nil means
	// slog.Default().
	Logger *slog.Logger
	// SyncLatency, if set, observes the seconds of every fsync of a data
	// file. It is called once per sync: Observe must be quick and safe
	// for concurrent use (a prometheus.Histogram fits).
	SyncLatency observe.Observer
	// Retain is retention: which closed files are deleted to keep the
	// disk from filling (RetainConfig; its zero value keeps 10% of the
	// filesystem free).
	Retain RetainConfig
	// Shared says that Dir is shared with other processes (or other
	// Stores) that use it with Shared too, each writing its own agents:
	// an agent is written by one of them at a time, the one holding its
	// lock (Store.Writer takes it, Store.Release gives it back), its
	// marks are kept in a state file of its own, loaded when it is
	// taken, its unfinished files are repaired when it is taken (not at
	// Open), and one of them, the retention leader, deletes for
	// retention (see shared.go and internal/retention). The zero value,
	// exclusive mode, assumes one Store on Dir: a root is used in one
	// mode at a time.
	Shared bool
	// Group names the writer group of a Shared root: Open admits the
	// Stores of one group to the root together and refuses those of
	// another group, and an exclusive Store, with ErrRootBusy (see
	// OwnerFile). Only with Shared; at most MaxGroupLen bytes.
	Group string
	// IndexBlock is the decoded size of the blocks of the index written
	// beside every data file (index.go): 0 means DefaultIndexBlock;
	// negative writes no index.
	IndexBlock int64
	// Flows writes a flow file beside every data file (flows.go,
	// docs/flows.md): a record per conversation, its Community ID
	// computed when read. The zero value writes none; the commands
	// default to DefaultFlows.
	Flows bool
	// FlowTable bounds and times the flow table of each agent (its zero
	// value: flow's defaults, MaxFlows 32768).
	FlowTable flow.Config
}

// Defaults of the Config fields, and the smallest values accepted.
const (
	DefaultRotateSize     = 1 << 30
	DefaultRotateInterval = time.Hour
	DefaultIdleClose      = time.Minute
	DefaultFsync          = time.Second

	MinRotateSize     = 4096
	MinRotateInterval = time.Second
	MinIndexBlock     = 4096
	MaxIndexBlock     = 1 << 30

	DefaultIndexBlock = index.DefaultBlockBytes
	DefaultFlows      = true
)

// Fsync policies (Config.Fsync): a positive duration syncs open files
// that often in the background; FsyncPerBatch syncs before every
// acknowledgement (in Writer.Commit); FsyncNever leaves it to the OS
// (files are still synced when closed).
const (
	FsyncPerBatch time.Duration = -1
	FsyncNever    time.Duration = -2
)

// ParseFsync reads a sync policy (Config.Fsync) as the collector's
// --fsync takes it: batch (FsyncPerBatch), never (FsyncNever) or a
// positive interval such as 1s.
func ParseFsync(s string) (time.Duration, error) {
	switch s {
	case "batch":
		return FsyncPerBatch, nil
	case "never":
		return FsyncNever, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("fsync %q: want batch, never or a positive duration like 1s", s)
	}
	return d, nil
}

// FormatFsync writes a sync policy as ParseFsync reads it (0: the
// default's).
func FormatFsync(d time.Duration) string {
	switch d {
	case FsyncPerBatch:
		return "batch"
	case FsyncNever:
		return "never"
	case 0:
		d = DefaultFsync
	}
	return d.String()
}

// ZstdFrames is how a zstd file is cut into frames (Config.ZstdFrames).
type ZstdFrames uint8

// Frame layouts of zstd files.
const (
	// ZstdFramePerFile: one frame per file, flushed at every commit.
	ZstdFramePerFile ZstdFrames = iota
	// ZstdFramePerBlock: a frame per index block, one for the file's
	// head and one for the statistics at its end.
	ZstdFramePerBlock
)

// String returns the name UnmarshalText reads: file or block.
func (z ZstdFrames) String() string {
	if z == ZstdFramePerBlock {
		return "block"
	}
	return "file"
}

// MarshalText writes z as UnmarshalText reads it.
func (z ZstdFrames) MarshalText() ([]byte, error) { return []byte(z.String()), nil }

// UnmarshalText reads file (ZstdFramePerFile) or block
// (ZstdFramePerBlock), as the collector's --file-zstd-frames takes it.
func (z *ZstdFrames) UnmarshalText(b []byte) error {
	switch string(b) {
	case "file":
		*z = ZstdFramePerFile
	case "block":
		*z = ZstdFramePerBlock
	default:
		return fmt.Errorf("zstd frames %q: want file or block", b)
	}
	return nil
}

// Validate reports the first unusable setting.
func (c *Config) Validate() error {
	if err := compress.Files.Check(c.FileCompress); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	switch {
	case c.ZstdFrames > ZstdFramePerBlock:
		return fmt.Errorf("store: zstd frames %d: want ZstdFramePerFile or ZstdFramePerBlock", c.ZstdFrames)
	case c.ZstdFrames == ZstdFramePerBlock && c.FileCompress.Codec != compress.Zstd:
		return fmt.Errorf("store: a zstd frame per block needs zstd file compression, not %v", c.FileCompress)
	case c.Dir == "":
		return errors.New("store: output directory is required")
	case c.RotateSize > 0 && c.RotateSize < MinRotateSize:
		return fmt.Errorf("store: rotate size %d bytes is below the minimum of %d", c.RotateSize, MinRotateSize)
	case c.RotateInterval > 0 && c.RotateInterval < MinRotateInterval:
		return fmt.Errorf("store: rotate interval %s is below the minimum of %s", c.RotateInterval, MinRotateInterval)
	case c.Fsync < 0 && c.Fsync != FsyncPerBatch && c.Fsync != FsyncNever:
		return fmt.Errorf("store: fsync policy %s: want a positive interval, FsyncPerBatch or FsyncNever", c.Fsync)
	case c.MaxOpenFiles > 0 && c.MaxOpenFiles < MinMaxOpenFiles:
		return fmt.Errorf("store: max open files %d is below the minimum of %d", c.MaxOpenFiles, MinMaxOpenFiles)
	case c.IndexBlock > 0 && (c.IndexBlock < MinIndexBlock || c.IndexBlock > MaxIndexBlock):
		return fmt.Errorf("store: index block %d bytes: want %d to %d", c.IndexBlock, MinIndexBlock, MaxIndexBlock)
	case c.FlowTable.Validate() != nil:
		return fmt.Errorf("store: %w", c.FlowTable.Validate())
	case c.IdleClose < 0:
		return fmt.Errorf("store: idle close %s is negative", c.IdleClose)
	case c.Group != "" && !c.Shared:
		return fmt.Errorf("store: group %q without a shared root", c.Group)
	case len(c.Group) > MaxGroupLen:
		return fmt.Errorf("store: group name of %d bytes is over %d", len(c.Group), MaxGroupLen)
	}
	rotate := c.RotateSize
	if rotate == 0 {
		rotate = DefaultRotateSize
	}
	return c.Retain.Validate(rotate)
}

func (c *Config) withDefaults() Config {
	d := *c
	if d.RotateSize == 0 {
		d.RotateSize = DefaultRotateSize
	}
	if d.RotateInterval == 0 {
		d.RotateInterval = DefaultRotateInterval
	}
	if d.Fsync == 0 {
		d.Fsync = DefaultFsync
	}
	if d.IdleClose == 0 {
		d.IdleClose = DefaultIdleClose
	}
	if d.MaxOpenFiles == 0 {
		d.MaxOpenFiles = DefaultMaxOpenFiles(noFileLimit())
	}
	if d.IndexBlock == 0 {
		d.IndexBlock = DefaultIndexBlock
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	return d
}
