package main

import (
	"cmp"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// stampVersion and stampCommit are set by the linker when a release
// is built (scripts/package.sh: -ldflags "-X main.stampVersion=1.2.3
// -X main.stampCommit=SHA"); empty otherwise.
var stampVersion, stampCommit string

// stamp is what the linker set: a version and commit that take the
// place of the build information's module version and VCS revision.
type stamp struct{ version, commit string }

// version describes this binary from its build information: the
// module's version (or the version stamped at link time), the commit
// it was built from (when built in a git checkout with VCS stamping on,
// or stamped at link time), and Go.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "pcapsync (no build information)\n"
	}
	return formatVersion(bi, stamp{stampVersion, stampCommit})
}

// formatVersion formats bi; a non-empty st.version replaces the module
// version, and st.commit is the commit when bi has no VCS revision.
func formatVersion(bi *debug.BuildInfo, st stamp) string {
	vcs := map[string]string{}
	for _, s := range bi.Settings {
		vcs[s.Key] = s.Value
	}
	if vcs["vcs.revision"] == "" {
		vcs["vcs.revision"] = st.commit
	}
	v := bi.Main.Version
	if st.version != "" {
		v = st.version
	}
	var b strings.Builder
	fmt.Fprintf(&b, "pcapsync %s\n", v)
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

// agentVersion is the one-line version an agent tells its collector
// (agent.Config.Version, shown in its status and console): the
// module's or stamped version, then the commit's first 12 hex digits
// and "+dirty" for uncommitted changes when known, e.g. "1.4.0" or
// "(devel) 0123456789ab+dirty"; a pseudo-version, which names the
// commit itself, is not followed by it again.
func agentVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	return formatAgentVersion(bi, stamp{stampVersion, stampCommit})
}

func formatAgentVersion(bi *debug.BuildInfo, st stamp) string {
	v := cmp.Or(st.version, bi.Main.Version)
	rev, dirty := st.commit, false
	for _, s := range bi.Settings {
		switch {
		case s.Key == "vcs.revision" && s.Value != "":
			rev = s.Value
		case s.Key == "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" || st.version != "" { // a release's stamped version says enough
		return v
	}
	// A pseudo-version (v0.0.0-20261128010241-2964f5a942b5, +dirty
	// since Go 1.24) names the commit already.
	short := rev[:min(len(rev), 12)]
	if !strings.Contains(v, "-"+short) {
		v += " " + short
	}
	if dirty && !strings.HasSuffix(v, "+dirty") {
		v += "+dirty"
	}
	return v
}
