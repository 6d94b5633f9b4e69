package main

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// envPrefix starts every variable that sets a flag (envName).
const envPrefix = "PCAPSYNC_"

// notSettings are PCAPSYNC_ variables that set no flag: debugging aids
// any pcapsync process reads, and the variables of the project's test
// and build scripts, which the binaries they start inherit. Every
// command ignores them (docs/configuration.md).
var notSettings = []string{
	"PCAPSYNC_DEBUG_CPUPROFILE", "PCAPSYNC_DEBUG_MEMPROFILE", "PCAPSYNC_TRACE",
	"PCAPSYNC_E2E_REQUIRE", "PCAPSYNC_KAFKA_LIBS", "PCAPSYNC_KAFKA_VERSION",
	"PCAPSYNC_CRASH_SEED", "PCAPSYNC_CRASH_CELLS", "PCAPSYNC_CRASH_DEADLINE",
	"PCAPSYNC_STORE_SHARED_HELPER", "PCAPSYNC_ARCH",
}

// environment returns the process's PCAPSYNC_ variables that have a
// value: an empty one counts as unset (as systemd's Environment= lines
// and shells often leave them).
func environment() map[string]string {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, envPrefix) && v != "" {
			env[k] = v
		}
	}
	return env
}

// checkEnvironment refuses a PCAPSYNC_ variable in env that is a flag of
// no pcapsync command (a misspelt one, most likely), as a configuration
// file's unknown setting is refused. A flag of another command than c
// is no error: one environment often serves several commands (a
// systemd drop-in for every unit), and each takes its own.
func checkEnvironment(c *cobra.Command, env map[string]string) error {
	var bad []string
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if env[k] == "" || !strings.HasPrefix(k, envPrefix) || slices.Contains(notSettings, k) {
			continue
		}
		name := flagOfEnv(k)
		f := c.Flags().Lookup(name)
		switch {
		case envName(name) != k: // lower case, a dash: no flag's variable
		case k == envName("config"), f != nil && f.Name == name && isSetting(f):
			continue
		case f != nil && isSetting(f):
			// An old name (aliases): its variable never set the flag.
			return usageError("environment %s: --%s is an old name of %s's --%s: set %s",
				k, name, c.CommandPath(), f.Name, envName(f.Name))
		case f == nil && flagOfAnother(c.Root(), name):
			continue
		}
		bad = append(bad, k)
	}
	if len(bad) == 0 {
		return nil
	}
	k := bad[0]
	if envName(flagOfEnv(k)) != k {
		return usageError("environment %s: unknown variable: a flag's variable is PCAPSYNC_ and its long name in capitals, _ for -%s",
			k, envHint(c, k))
	}
	return usageError("environment %s: unknown variable: %s has no --%s, nor has any other pcapsync command%s",
		k, c.CommandPath(), flagOfEnv(k), envHint(c, k))
}

// flagOfEnv is the long flag name a PCAPSYNC_ variable stands for.
func flagOfEnv(k string) string {
	return strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(k, envPrefix), "_", "-"))
}

// isSetting reports whether f can be set by a variable or a file.
func isSetting(f *pflag.Flag) bool {
	return f.Name != "help" && f.Name != "version" && f.Name != "config"
}

// flagOfAnother reports whether some command of the tree under root
// has the flag name (under its name or an old one).
func flagOfAnother(root *cobra.Command, name string) bool {
	found := false
	eachCommand(root, func(c *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{c.Flags(), c.PersistentFlags()} {
			if f := fs.Lookup(name); f != nil && f.Name != "help" {
				found = true
			}
		}
	})
	return found
}

// eachCommand calls fn with c and every command under it.
func eachCommand(c *cobra.Command, fn func(*cobra.Command)) {
	fn(c)
	for _, s := range c.Commands() {
		eachCommand(s, fn)
	}
}

// envHint is " (did you mean PCAPSYNC_X?)" for the variables of c's
// flags close to k, or else those of another command's flags, or "".
func envHint(c *cobra.Command, k string) string {
	var own []string
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if isSetting(f) && nearName(envName(f.Name), k) {
			own = append(own, envName(f.Name))
		}
	})
	if len(own) > 0 {
		return fmt.Sprintf(" (did you mean %s?)", strings.Join(own, ", "))
	}
	var other []string
	eachCommand(c.Root(), func(s *cobra.Command) {
		s.Flags().VisitAll(func(f *pflag.Flag) {
			if isSetting(f) && nearName(envName(f.Name), k) {
				other = append(other, envName(f.Name)+" of "+s.CommandPath())
			}
		})
	})
	if len(other) > 0 {
		slices.Sort(other)
		return fmt.Sprintf(" (did you mean %s?)", strings.Join(slices.Compact(other), ", "))
	}
	return ""
}

// nearName reports whether variable a is within two edits of variable
// b written as variables are (capitals, _ for -), cobra's distance for
// its own "did you mean".
func nearName(a, b string) bool {
	return editDistance(a, strings.ToUpper(strings.ReplaceAll(b, "-", "_"))) <= 2
}

// editDistance is the Levenshtein distance between a and b (bytes: the
// names are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			sub := prev[j-1]
			if a[i-1] != b[j-1] {
				sub++
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, sub)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
