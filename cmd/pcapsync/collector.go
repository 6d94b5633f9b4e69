package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/pcapsync/pcapsync/internal/collector"
)

// DefaultPort is the collector's TCP port when none is given.
const DefaultPort = "7733"

func runCollector(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("collector", "pcapsync collector --dir DIR [--listen HOST:PORT] [flags]", stderr)
	var cfg collector.Config
	listen := fs.String("listen", "127.0.0.1:"+DefaultPort, "address to accept agents on (use 0.0.0.0:"+DefaultPort+" or [::]:"+DefaultPort+" for every interface)")
	fs.StringVar(&cfg.Dir, "dir", "", "output root: files go to DIR/<agent>/<agent>_<UTC start>.pcapng (required)")
	rotateSize := int64(1 << 30)
	fs.Var(sizeFlag{&rotateSize}, "rotate-size", "start a new file once one reaches this size, e.g. 100M, 1G; 0 disables")
	fs.DurationVar(&cfg.RotateInterval, "rotate-interval", time.Hour, "start a new file at every wall-clock multiple of this interval (UTC; 1h turns over on the hour); 0 disables")
	fsync := fs.String("fsync", "1s", "when written data is synced to disk: batch (before every acknowledgement), never (left to the OS; closed files are synced anyway unless never), or an interval such as 1s (an acknowledgement then means written to the OS: safe if the collector crashes, an OS crash can lose up to the interval)")
	fs.DurationVar(&cfg.IdleClose, "idle-close", time.Minute, "close an agent's file this long after its connection broke without a goodbye")
	maxFrame := int64(16 << 20)
	fs.Var(sizeFlag{&maxFrame}, "max-frame", "largest frame accepted from an agent")
	fs.DurationVar(&cfg.HandshakeTimeout, "handshake-timeout", 10*time.Second, "time a new connection has to complete its handshake")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", 10*time.Second, "on SIGINT/SIGTERM, time connections have to finish before they are cut")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	log, err := newLogger(stderr, *level)
	if err != nil {
		return err
	}
	cfg.Logger = log
	switch *fsync {
	case "batch":
		cfg.Fsync = collector.FsyncPerBatch
	case "never":
		cfg.Fsync = collector.FsyncNever
	default:
		d, err := time.ParseDuration(*fsync)
		if err != nil || d <= 0 {
			return fmt.Errorf("%w: --fsync %q: want batch, never or a positive duration like 1s", errUsage, *fsync)
		}
		cfg.Fsync = d
	}
	cfg.RotateSize = disabledIfZero(rotateSize)
	cfg.RotateInterval = time.Duration(disabledIfZero(int64(cfg.RotateInterval)))
	if maxFrame <= 0 || maxFrame > 1<<30 {
		return fmt.Errorf("%w: --max-frame %d out of range", errUsage, maxFrame)
	}
	cfg.MaxFrame = uint32(maxFrame)
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	core, err := collector.NewCore(cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	log.Info("collector listening", "addr", ln.Addr().String(), "dir", cfg.Dir)
	tickCtx, stopTick := context.WithCancel(context.Background())
	ticked := make(chan struct{})
	go func() { core.Run(tickCtx); close(ticked) }()
	serr := collector.NewServer(core).Serve(ctx, ln)
	stopTick()
	<-ticked
	cerr := core.Close()
	c := &core.Counters
	fmt.Fprintf(stdout, "pcapsync collector: sessions %d, rejected %d, protocol errors %d, batches %d, packets %d, bytes %d, duplicates dropped %d, file errors %d\n",
		c.Sessions.Load(), c.Rejected.Load(), c.ProtocolErrors.Load(), c.Batches.Load(), c.Packets.Load(), c.Bytes.Load(), c.Duplicates.Load(), c.FileErrors.Load())
	if serr != nil {
		return serr
	}
	return cerr
}

// disabledIfZero maps a user's 0 ("disable") to the Config's negative.
func disabledIfZero(v int64) int64 {
	if v == 0 {
		return -1
	}
	return v
}
