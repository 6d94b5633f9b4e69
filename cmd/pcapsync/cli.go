package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// errUsage marks a bad command line, configuration file or environment
// variable (exit 2, like a flag parser's own errors).
var errUsage = errors.New("usage")

// exitCode is the exit status of err: 2 usage, 3 nothing to answer
// from, 4 a partial answer (docs/query.md), 1 any other failure.
func exitCode(err error) int {
	switch {
	case errors.Is(err, errUsage):
		return 2
	case errors.Is(err, errQueryUncovered):
		return 3
	case errors.Is(err, errQueryPartial):
		return 4
	}
	return 1
}

// usageError returns a usage error with the message format gives.
func usageError(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, a...))
}

// streams are the process's output, which tests replace.
type streams struct {
	stdout, stderr io.Writer
}

// runFunc is a leaf command's body, run once its flags are parsed and
// the environment and configuration file applied.
type runFunc func(ctx context.Context, args []string) error

// leaf returns a command whose flags define defines on its flag set and
// whose body is the function define returns. use is the command's
// synopsis (its name first), long its help text.
func leaf(use, short, long string, args cobra.PositionalArgs, define func(fs *pflag.FlagSet) runFunc) *cobra.Command {
	c := &cobra.Command{Use: use, Short: short, Long: long, Args: args}
	body := define(c.Flags())
	c.RunE = func(c *cobra.Command, args []string) error { return withFlagNames(body(c.Context(), args)) }
	return c
}

// group returns a command that only holds subcommands; run without one,
// or with an unknown one, it is a usage error.
func group(use, short string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{Use: use, Short: short, Args: cobra.ArbitraryArgs}
	c.RunE = func(c *cobra.Command, args []string) error {
		if len(args) == 0 {
			return usageError("%s needs a subcommand: %s", c.CommandPath(), strings.Join(subNames(c), ", "))
		}
		return usageError("%s has no subcommand %q (it has %s)", c.CommandPath(), args[0], strings.Join(subNames(c), ", "))
	}
	c.AddCommand(subs...)
	return c
}

func subNames(c *cobra.Command) []string {
	var names []string
	for _, s := range c.Commands() {
		if s.IsAvailableCommand() {
			names = append(names, s.Name())
		}
	}
	return names
}

// noArgs refuses positional arguments with a usage error.
func noArgs(c *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError("%s: unexpected argument %q", c.CommandPath(), args[0])
	}
	return nil
}

// Flag annotations the settings code reads.
const (
	// annRepeatable marks a flag that may be given more than once (and
	// on more than one line of a configuration file).
	annRepeatable = "pcapsync/repeatable"
	// annPositional marks the flag that a command's positional arguments
	// stand for (the agent's filter): given as arguments, it counts as
	// given on the command line.
	annPositional = "pcapsync/positional"
)

func annotate(fs *pflag.FlagSet, name, key string) {
	if err := fs.SetAnnotation(name, key, []string{"true"}); err != nil {
		panic(err) // a flag name misspelt in this package
	}
}

// aliases maps old flag names to their new ones, per command; the old
// names stay accepted and are documented in the help text.
func aliases(fs *pflag.FlagSet, old map[string]string) {
	fs.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		if n, ok := old[name]; ok {
			return pflag.NormalizedName(n)
		}
		return pflag.NormalizedName(name)
	})
}

// singleDashLong rewrites "-name" and "-name=value" to "--name..."
// where name is a long flag of the command args select, so command
// lines written for Go's flag package (one dash, as the first releases
// documented) keep working. Short flags and their clusters ("-i eth0",
// "-pv"), values of flags, and everything after "--" stay as they are.
func singleDashLong(root *cobra.Command, args []string) []string {
	c := root
	i := 0
	for ; i < len(args); i++ {
		next := subcommand(c, args[i])
		if next == nil {
			break
		}
		c = next
	}
	c.InheritedFlags() // merges the persistent flags into c.Flags()
	fs := c.Flags()
	out := append([]string(nil), args[:i]...)
	valueNext := false
	for ; i < len(args); i++ {
		a := args[i]
		switch {
		case valueNext:
			valueNext = false
		case a == "--":
			return append(out, args[i:]...)
		case strings.HasPrefix(a, "--"):
			name, _, hasValue := strings.Cut(a[2:], "=")
			valueNext = !hasValue && takesValue(fs.Lookup(name))
		case len(a) > 2 && a[0] == '-':
			name, _, hasValue := strings.Cut(a[1:], "=")
			if f := fs.Lookup(name); f != nil || name == "help" {
				a = "-" + a
				valueNext = !hasValue && takesValue(f)
				break
			}
			valueNext = clusterWantsValue(fs, a[1:])
		case len(a) == 2 && a[0] == '-':
			valueNext = takesValue(fs.ShorthandLookup(a[1:]))
		}
		out = append(out, a)
	}
	return out
}

// clusterWantsValue reports whether the next argument is the value of
// the last flag in a cluster of short flags such as "pv" or "pi", as
// pflag reads it: the first flag taking a value takes the rest of the
// cluster, or the next argument when it ends the cluster.
func clusterWantsValue(fs *pflag.FlagSet, cluster string) bool {
	for i := range len(cluster) {
		f := fs.ShorthandLookup(cluster[i : i+1])
		if f == nil {
			return false
		}
		if takesValue(f) {
			return i == len(cluster)-1
		}
	}
	return false
}

func subcommand(c *cobra.Command, name string) *cobra.Command {
	for _, s := range c.Commands() {
		if s.Name() == name || s.HasAlias(name) {
			return s
		}
	}
	return nil
}

func takesValue(f *pflag.Flag) bool { return f != nil && f.NoOptDefVal == "" }

// envName is the environment variable that sets flag name.
func envName(name string) string {
	return "PCAPSYNC_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// applySettings gives every flag of c not given on the command line its
// value from the environment (PCAPSYNC_NAME) or else from the
// configuration file (--config FILE, or PCAPSYNC_CONFIG), the
// precedence documented in docs/configuration.md. env holds the
// PCAPSYNC_ variables (environment); an empty value counts as unset.
// Every key of the file must be a flag of c, and every variable a flag
// of some command (checkEnvironment); a bad value is refused with where
// it came from.
func applySettings(c *cobra.Command, args []string, env map[string]string) error {
	if err := checkEnvironment(c, env); err != nil {
		return err
	}
	lookupEnv := func(k string) (string, bool) { v, ok := env[k]; return v, ok && v != "" }
	fs := c.Flags()
	path, _ := fs.GetString("config")
	if !fs.Changed("config") {
		path, _ = lookupEnv(envName("config"))
	}
	var file *configFile
	if path != "" {
		var err error
		if file, err = readConfigFile(path); err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		if err := file.check(fs, c.CommandPath(), foreignSettings(c)); err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
	}
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed || f.Name == "config" || f.Name == "help" || f.Name == "version" {
			return
		}
		if _, ok := f.Annotations[annPositional]; ok && len(args) > 0 {
			return
		}
		if v, ok := lookupEnv(envName(f.Name)); ok {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%w: environment %s=%q: %w", errUsage, envName(f.Name), v, err))
			}
			return
		}
		if file != nil {
			errs = append(errs, file.apply(fs, f.Name))
		}
	})
	return errors.Join(errs...)
}

// foreignSettings returns whether a name is a setting (a long flag) of
// one of the commands c's annForeign annotation names, which c skips in
// its configuration file; nil if it names none.
func foreignSettings(c *cobra.Command) func(name string) bool {
	var others []*pflag.FlagSet
	for _, name := range strings.Fields(c.Annotations[annForeign]) {
		if o := subcommand(c.Root(), name); o != nil {
			others = append(others, o.Flags())
		}
	}
	if others == nil {
		return nil
	}
	return func(name string) bool {
		for _, fs := range others {
			if f := fs.Lookup(name); f != nil && f.Name != "help" {
				return true
			}
		}
		return false
	}
}
