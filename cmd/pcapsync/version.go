package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// version describes this binary from its build information: the
// module's version, the commit it was built from (when built in a git
// checkout with VCS stamping on, as scripts/build.sh does), and Go.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "pcapsync (no build information)\n"
	}
	return formatVersion(bi)
}

func formatVersion(bi *debug.BuildInfo) string {
	vcs := map[string]string{}
	for _, s := range bi.Settings {
		vcs[s.Key] = s.Value
	}
	var b strings.Builder
	fmt.Fprintf(&b, "pcapsync %s\n", bi.Main.Version)
	if rev := vcs["vcs.revision"]; rev != "" {
		fmt.Fprintf(&b, "commit %s", rev)
		var notes []string
		if t := vcs["vcs.time"]; t != "" {
			notes = append(notes, t)
		}
		if vcs["vcs.modified"] == "true" {
			notes = append(notes, "with uncommitted changes")
		}
		if len(notes) > 0 {
			fmt.Fprintf(&b, " (%s)", strings.Join(notes, ", "))
		}
		b.WriteString("\n")
	} else {
		b.WriteString("commit unknown (built without VCS information)\n")
	}
	fmt.Fprintf(&b, "%s %s/%s\n", bi.GoVersion, runtime.GOOS, runtime.GOARCH)
	return b.String()
}
