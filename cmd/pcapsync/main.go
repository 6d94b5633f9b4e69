// Command pcapsync streams packet captures from many hosts to one
// collector that writes pcapng files. See README.md.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/journal"
	"github.com/pcapsync/pcapsync/internal/units"
)

// rootIntro and rootSettings are the top-level help, before and after
// the synopsis of every command (rootSynopsis).
const (
	rootIntro = `pcapsync streams packets captured on many hosts to one collector, which
writes them into pcapng files per host.`
	rootSettings = `Every flag can also be set by an environment variable (--snaplen by
PCAPSYNC_SNAPLEN) or a line of a configuration file (--config FILE:
"snaplen = 1500"); a flag on the command line wins over the variable,
the variable over the file, the file over the default
(docs/configuration.md).`
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// PCAPSYNC_DEBUG_CPUPROFILE=FILE writes a CPU profile of the whole
	// run, for "go tool pprof"; a debugging aid, not a user feature (no
	// flag has the name, so it sets none).
	if path := os.Getenv("PCAPSYNC_DEBUG_CPUPROFILE"); path != "" {
		// "%p" becomes the process id: one profile per process when a
		// benchmark starts several.
		path = strings.ReplaceAll(path, "%p", strconv.Itoa(os.Getpid()))
		if f, err := os.Create(path); err == nil && pprof.StartCPUProfile(f) == nil {
			defer pprof.StopCPUProfile()
		}
	}
	// PCAPSYNC_DEBUG_MEMPROFILE=FILE ("%p" as above) writes the
	// allocations of the whole run (pprof's allocs profile) at exit.
	if path := os.Getenv("PCAPSYNC_DEBUG_MEMPROFILE"); path != "" {
		path = strings.ReplaceAll(path, "%p", strconv.Itoa(os.Getpid()))
		defer writeAllocs(path)
	}
	if code := execute(ctx, os.Args[1:], os.Stdout, os.Stderr); code != 0 {
		pprof.StopCPUProfile()
		os.Exit(code)
	}
}

// execute runs the command line args as run does and returns the exit
// status; when the command fails it reports the error on stderr first
// (reportError).
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, err := runCommand(ctx, args, stdout, stderr)
	if err == nil {
		return 0
	}
	code := exitCode(err)
	reportError(stderr, c, err, code)
	return code
}

// run runs the command line args (without the program name).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	_, err := runCommand(ctx, args, stdout, stderr)
	return err
}

// runCommand runs the command line args and returns the command that
// ran (or failed to), as cobra found it.
func runCommand(ctx context.Context, args []string, stdout, stderr io.Writer) (*cobra.Command, error) {
	root := newRoot(streams{stdout, stderr})
	root.SetArgs(singleDashLong(root, args))
	return root.ExecuteContextC(ctx)
}

// reportError writes err, the error command c ended with, and the exit
// status code to stderr. A command whose --log-format is json writes it
// as one of its log records: level ERROR, msg "exit", err the error's
// text, status the exit status. Any other writes the line "pcapsync:
// ERROR", with the journal's error priority before it on the journal's
// stream (journal.Stream).
func reportError(stderr io.Writer, c *cobra.Command, err error, code int) {
	if c != nil {
		if f, ferr := c.Flags().GetString("log-format"); ferr == nil && f == "json" {
			lf := logFlags{level: "error", format: f}
			if log, lerr := lf.logger(stderr); lerr == nil {
				log.Error("exit", "err", err.Error(), "status", code)
				return
			}
		}
	}
	prefix := ""
	if journal.Stream(stderr) {
		prefix = journal.Prefix(slog.LevelError)
	}
	fmt.Fprintf(stderr, "%spcapsync: %s\n", prefix, err.Error())
}

// newRoot returns the command tree: every subcommand with its flags.
func newRoot(s streams) *cobra.Command {
	root := &cobra.Command{
		Use:           "pcapsync",
		Short:         "stream packet captures from many hosts to one collector",
		SilenceErrors: true,
		SilenceUsage:  true,
		Args: func(c *cobra.Command, args []string) error {
			if v, _ := c.Flags().GetBool("version"); v {
				return nil
			}
			if len(args) == 0 {
				fmt.Fprint(s.stderr, c.UsageString())
				return usageError("no command given")
			}
			hint := ""
			if sug := c.SuggestionsFor(args[0]); len(sug) > 0 {
				hint = fmt.Sprintf(" (did you mean %s?)", strings.Join(sug, ", "))
			}
			return usageError("unknown command %q%s; run \"pcapsync --help\" for the list", args[0], hint)
		},
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprint(s.stdout, version())
			return err
		},
		PersistentPreRunE: func(c *cobra.Command, args []string) error { return applySettings(c, args, environment()) },
	}
	root.SetOut(s.stdout)
	root.SetErr(s.stderr)
	// --version is this flag and RunE, not cobra's Version field: that
	// renders through a text/template, and a program that executes one
	// keeps every exported method alive in the linker (the binary grew
	// from 23 to 36 MB).
	root.Flags().Bool("version", false, "print the version, the commit it was built from and the Go release, and exit")
	root.PersistentFlags().String("config", "", "read settings from this `FILE`: one \"name = value\" per line, name a long flag of the command (docs/configuration.md); also PCAPSYNC_CONFIG")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%w: %s: %w (see %s --help)", errUsage, c.CommandPath(), err, c.CommandPath())
	})
	cmds := []*cobra.Command{collectorCommand(s), writerCommand(s), agentCommand(s), tailCommand(s), queryCommand(s), flowsCommand(s), correlateCommand(s), statusCommand(s), consoleCommand(s), genCommand(s), indexCommand(s)}
	cmds = append(cmds, labCommands(s)...)
	root.AddCommand(cmds...)
	root.InitDefaultCompletionCmd() // now, not at Execute: the synopsis lists it
	root.Long = rootIntro + "\n\n" + rootSynopsis(append(cmds, subcommand(root, "completion"))) + "\n\n" + rootSettings
	return root
}

// rootSynopsis is a line per command of cmds, from its definition: a
// command's synopsis (its Use), or a group's subcommands.
func rootSynopsis(cmds []*cobra.Command) string {
	var b strings.Builder
	for _, c := range cmds {
		if c == nil {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		if c.HasAvailableSubCommands() {
			fmt.Fprintf(&b, "  pcapsync %s %s [flags]", c.Name(), strings.Join(subNames(c), "|"))
			continue
		}
		fmt.Fprintf(&b, "  pcapsync %s", c.Use)
	}
	return b.String()
}

// logFlags are the logging flags of the commands that log.
type logFlags struct {
	level, format string
	verbose       bool
}

func (l *logFlags) register(fs *pflag.FlagSet, verbose bool) {
	fs.StringVar(&l.level, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&l.format, "log-format", "text", "text (key=value) or json (one object per line, for log shippers)")
	if verbose {
		fs.BoolVarP(&l.verbose, "verbose", "v", false, "log at debug level (as --log-level debug)")
	}
}

// logger returns the logger the flags describe, writing to stderr:
// on the journal's stream (journal.Stream, a unit's stderr) each line
// starts with its level's priority, "<4>" for WARN (journal.Handler),
// in both formats.
func (l *logFlags) logger(stderr io.Writer) (*slog.Logger, error) {
	name := l.level
	if l.verbose {
		name = "debug"
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(name)); err != nil {
		return nil, usageError("--log-level %q: want debug, info, warn or error", l.level)
	}
	opts := &slog.HandlerOptions{Level: level}
	var newHandler func(io.Writer) slog.Handler
	switch l.format {
	case "text":
		newHandler = func(w io.Writer) slog.Handler { return slog.NewTextHandler(w, opts) }
	case "json":
		opts.ReplaceAttr = jsonDuration
		newHandler = func(w io.Writer) slog.Handler { return slog.NewJSONHandler(w, opts) }
	default:
		return nil, usageError("--log-format %q: want text or json", l.format)
	}
	if journal.Stream(stderr) {
		return slog.New(journal.Handler(stderr, newHandler)), nil
	}
	return slog.New(newHandler(stderr)), nil
}

// jsonDuration is the JSON logs' ReplaceAttr: a duration as Go writes
// it ("1.5s", as the text logs and the flags have it), not slog's
// integer nanoseconds.
func jsonDuration(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// parseSize reads a byte size (units.ParseSize): "64M", "1GiB".
func parseSize(s string) (int64, error) { return units.ParseSize(s) }

// sizeFlag is a pflag.Value for byte sizes.
type sizeFlag struct{ n *int64 }

func (f sizeFlag) String() string {
	if f.n == nil {
		return "0"
	}
	return fmt.Sprint(*f.n)
}

func (sizeFlag) Type() string { return "size" }

func (f sizeFlag) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	*f.n = n
	return nil
}

// intSizeFlag is a pflag.Value for byte sizes held in an int.
type intSizeFlag struct{ n *int }

func (f intSizeFlag) String() string {
	if f.n == nil {
		return "0"
	}
	return strconv.Itoa(*f.n)
}

func (intSizeFlag) Type() string { return "size" }

func (f intSizeFlag) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	if n > 1<<40 || int64(int(n)) != n {
		return fmt.Errorf("size %q is %w", s, units.ErrRange)
	}
	*f.n = int(n)
	return nil
}

// compressFlag is a pflag.Value for a compress.Spec.
type compressFlag struct{ sp *compress.Spec }

func (f compressFlag) String() string {
	if f.sp == nil {
		return ""
	}
	return f.sp.String()
}

func (compressFlag) Type() string { return "codec" }

func (f compressFlag) Set(s string) error {
	sp, err := compress.ParseSpec(s)
	if err != nil {
		return err
	}
	*f.sp = sp
	return nil
}

// writeAllocs writes the allocs profile to path, for
// PCAPSYNC_DEBUG_MEMPROFILE; errors are ignored (a debugging aid).
func writeAllocs(path string) {
	if f, err := os.Create(path); err == nil {
		pprof.Lookup("allocs").WriteTo(f, 0)
		f.Close()
	}
}
