package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestEnvironmentChecked runs the real command tree: a PCAPSYNC_
// variable that is a flag of no command is a usage error (exit 2) naming
// the variable, the command and the close names; one that is a flag of
// another command, or one of the scripts' variables, is ignored.
func TestEnvironmentChecked(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string // "" for success
	}{
		{"misspelt", map[string]string{"PCAPSYNC_SNAPLENN": "96"}, []string{"gen", "man", "--dir", "DIR"},
			"environment PCAPSYNC_SNAPLENN: unknown variable: pcapsync gen man has no --snaplenn, nor has any other pcapsync command (did you mean PCAPSYNC_SNAPLEN of pcapsync agent?)"},
		{"misspelt own flag", map[string]string{"PCAPSYNC_DRI": "/x"}, []string{"gen", "man"},
			"pcapsync gen man has no --dri, nor has any other pcapsync command (did you mean PCAPSYNC_DIR?)"},
		{"no flag at all", map[string]string{"PCAPSYNC_FOO": "1"}, []string{"--version"},
			"environment PCAPSYNC_FOO: unknown variable: pcapsync has no --foo"},
		{"another command's flag", map[string]string{"PCAPSYNC_SNAPLEN": "96", "PCAPSYNC_SPOOL": "/var/spool/x", "PCAPSYNC_LISTEN": ":1"}, []string{"gen", "man", "--dir", "DIR"}, ""},
		{"scripts' variables", map[string]string{"PCAPSYNC_E2E_REQUIRE": "1", "PCAPSYNC_DEBUG_MEMPROFILE": "", "PCAPSYNC_TRACE": "/dev/null"}, []string{"--version"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			args := append([]string(nil), tc.args...)
			for i, a := range args {
				if a == "DIR" {
					args[i] = t.TempDir()
				}
			}
			var out bytes.Buffer
			err := run(context.Background(), args, &out, &out)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("pcapsync %q: %v", args, err)
			case tc.want == "":
			case err == nil:
				t.Fatalf("pcapsync %q: no error, want %q", args, tc.want)
			case exitCode(err) != 2 || !strings.Contains(err.Error(), tc.want):
				t.Fatalf("pcapsync %q: %v (exit %d), want exit 2 and %q", args, err, exitCode(err), tc.want)
			}
		})
	}
}
