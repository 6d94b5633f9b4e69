// Command redisbench runs the Redis pipeline benchmark (package
// redisbench) against a redis-server of its own, on a free loopback
// port, and prints a Markdown table. wirecompare/redis.sh runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pcapsync/pcapsync/internal/redisfeed/redistest"
	"github.com/pcapsync/pcapsync/wirecompare/redisbench"
)

func main() {
	var cfg redisbench.Config
	flag.IntVar(&cfg.Ops, "ops", 2000, "round trips measured per payload, codec and mode")
	flag.IntVar(&cfg.Entries, "entries", 2000, "entries stored for the memory figures")
	flag.IntVar(&cfg.Records, "records", 64, "packets per batch")
	flag.Parse()
	cfg.JSONLines = []int{1, 5, 20}
	env := &cmdTB{}
	defer env.cleanup()
	if err := run(env, cfg); err != nil {
		env.cleanup()
		fmt.Fprintln(os.Stderr, "redisbench:", err)
		os.Exit(1)
	}
}

func run(env *cmdTB, cfg redisbench.Config) error {
	srv := redistest.Start(env)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, DisableIdentity: true})
	defer rdb.Close()
	ctx := context.Background()
	version := rdb.InfoMap(ctx, "server").Item("Server", "redis_version")
	res, err := redisbench.Run(ctx, rdb, cfg, os.Stderr)
	if err != nil {
		return err
	}
	fmt.Printf("Redis %s on loopback TCP, go-redis v9; %s, %d CPUs, %s/%s; %s; %d round trips per row, %d entries for memory; batches of %d packets, JSON log payloads of %v lines.\n\n",
		version, time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(),
		cfg.Ops, cfg.Entries, cfg.Records, cfg.JSONLines)
	redisbench.Markdown(os.Stdout, res)
	return nil
}

// cmdTB gives redistest what it needs outside a test.
type cmdTB struct {
	cleanups []func()
	dirs     []string
}

func (*cmdTB) Helper() {}

func (e *cmdTB) Fatalf(format string, args ...any) {
	e.cleanup()
	fmt.Fprintf(os.Stderr, "redisbench: "+format+"\n", args...)
	os.Exit(1)
}

func (e *cmdTB) Skipf(format string, args ...any) { e.Fatalf(format, args...) }

func (e *cmdTB) TempDir() string {
	d, err := os.MkdirTemp("", "redisbench-")
	if err != nil {
		e.Fatalf("%v", err)
	}
	e.cleanups = append(e.cleanups, func() { os.RemoveAll(d) })
	return d
}

func (e *cmdTB) Cleanup(f func()) { e.cleanups = append(e.cleanups, f) }

// cleanup runs the cleanups, last first, once.
func (e *cmdTB) cleanup() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
	e.cleanups = nil
}
