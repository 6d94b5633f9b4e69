// Command pcapsync streams packet captures from many hosts to one
// collector that writes pcapng files. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"

	"github.com/pcapsync/pcapsync/internal/compress"
)

const usage = `pcapsync streams packets captured on many hosts to one collector.

Usage:
  pcapsync collector --dir DIR [--listen HOST:PORT] (--tls-cert F --tls-key F [--tls-client-ca F] | --insecure) [flags]
  pcapsync agent --collector HOST[:PORT] (--iface IF[,IF...] | --read FILE) (--tls-ca F [--tls-cert F --tls-key F] | --insecure) [flags] [FILTER]
  pcapsync gen file --out FILE [--count N] [--mix 64|imix|mixed]
  pcapsync gen udp --to HOST:PORT [--count N] [--seconds S] [--rate PPS] [--mix 64|imix]
  pcapsync gen certs --dir DIR --collector NAME[,IP...] --agents NAME[,NAME...]
  pcapsync tail (--collector-admin HOST:PORT | --redis URL) --agent NAME [--iface IF] [--filter EXPR] > out.pcapng
  pcapsync status --collector-admin HOST:PORT [--json]
  pcapsync bench transport|fanin|latency|pipeline|live [flags]

Run "pcapsync COMMAND --help" for the flags of a command.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// PCAPSYNC_CPUPROFILE=FILE writes a CPU profile of the whole run, for
	// "go tool pprof"; a debugging aid, not a user feature.
	if path := os.Getenv("PCAPSYNC_CPUPROFILE"); path != "" {
		// "%p" becomes the process id: one profile per process when a
		// benchmark starts several.
		path = strings.ReplaceAll(path, "%p", strconv.Itoa(os.Getpid()))
		if f, err := os.Create(path); err == nil && pprof.StartCPUProfile(f) == nil {
			defer pprof.StopCPUProfile()
		}
	}
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		pprof.StopCPUProfile()
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "pcapsync:", err)
		}
		os.Exit(exitCode(err))
	}
}

// errUsage marks a bad command line (exit 2, like flag's own errors).
var errUsage = errors.New("usage")

func exitCode(err error) int {
	if errors.Is(err, errUsage) || errors.Is(err, flag.ErrHelp) {
		return 2
	}
	return 1
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("%w: no command given", errUsage)
	}
	switch args[0] {
	case "collector":
		return runCollector(ctx, args[1:], stdout, stderr)
	case "agent":
		return runAgent(ctx, args[1:], stdout, stderr)
	case "gen":
		return runGen(ctx, args[1:], stdout, stderr)
	case "bench":
		return runBench(ctx, args[1:], stdout, stderr)
	case "tail":
		return runTail(ctx, args[1:], stdout, stderr)
	case "status":
		return runStatus(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("%w: unknown command %q", errUsage, args[0])
}

// newFlagSet returns a FlagSet that reports errors instead of exiting.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s\n\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	return nil
}

func newLogger(stderr io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("%w: --log-level %q: want debug, info, warn or error", errUsage, level)
	}
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: l})), nil
}

// parseSize reads a byte size: a number with an optional suffix K, M,
// G, T (powers of 1024; KiB, MiB, ... too) or KB, MB, GB, TB (powers of
// 1000), like "64M" or "1GiB".
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1},
	} {
		if rest, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = rest, u.mult
			break
		}
	}
	var n int64
	if _, err := fmt.Sscan(t, &n); err != nil || n < 0 || fmt.Sprint(n) != strings.TrimSpace(t) {
		return 0, fmt.Errorf("size %q: want a whole number with an optional K, M, G or T suffix", s)
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return n * mult, nil
}

// sizeFlag is a flag.Value for byte sizes.
type sizeFlag struct{ n *int64 }

func (f sizeFlag) String() string {
	if f.n == nil {
		return "0"
	}
	return fmt.Sprint(*f.n)
}

func (f sizeFlag) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	*f.n = n
	return nil
}

// intSizeFlag is a flag.Value for byte sizes held in an int.
type intSizeFlag struct{ n *int }

func (f intSizeFlag) String() string {
	if f.n == nil {
		return "0"
	}
	return strconv.Itoa(*f.n)
}

func (f intSizeFlag) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	if n > 1<<40 || int64(int(n)) != n {
		return fmt.Errorf("size %q is too large", s)
	}
	*f.n = int(n)
	return nil
}

// compressFlag is a flag.Value for a compress.Spec.
type compressFlag struct{ sp *compress.Spec }

func (f compressFlag) String() string {
	if f.sp == nil {
		return "" // the zero flag.Value, which flag's help compares with
	}
	return f.sp.String()
}

func (f compressFlag) Set(s string) error {
	sp, err := compress.ParseSpec(s)
	if err != nil {
		return err
	}
	*f.sp = sp
	return nil
}
