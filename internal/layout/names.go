package layout

import (
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/flow"
	"github.com/pcapsync/pcapsync/internal/index"
)

// PartSuffix marks the file an agent is being written to. A file is
// renamed to drop the suffix once it is closed and complete, so a
// consumer that globs "*.pcapng" sees only finished files.
const PartSuffix = ".part"

// RetainDir, below the root, holds retention's index of closed files,
// one file per agent (<agent>.json: name, bytes, first and last packet
// of each). It is a cache, written without fsync: a file it lacks, or
// lists with another size or modification time, is read at start for
// its packets' times. Anyone who can write the root can write it, so it
// is read with a size limit, never through a link or FIFO, and its
// entries checked (ParseIndex). Agent names cannot start with '.', so
// it never collides with an agent directory.
const RetainDir = ".pcapsync-retain"

// OwnPrefix starts the name of every file and directory the writer
// keeps at the top of the root beside the agent directories (its state,
// reserve, owner lock, retention index, Shared mode's locks and
// states). Agent names cannot start with '.'.
const OwnPrefix = ".pcapsync"

// FileTimeLayout is the UTC start in a data file's name.
const FileTimeLayout = "20060102T150405.000"

// IsDataFile reports whether name is a name the Store gives the closed
// data files of agent: <agent>_<UTC start>Z[_NNN].pcapng[.gz|.zst], the
// start a valid time. Retention deletes, and AgentFiles lists, files of
// such names only; any other file in an agent's directory (a capture
// copied there by hand, an export) is not the writer's and is left
// alone.
func IsDataFile(agent, name string) bool {
	rest, ok := strings.CutPrefix(name, agent+"_")
	if !ok || len(rest) < len(FileTimeLayout)+1 || rest[len(FileTimeLayout)] != 'Z' {
		return false
	}
	if _, err := time.Parse(FileTimeLayout, rest[:len(FileTimeLayout)]); err != nil {
		return false
	}
	rest = rest[len(FileTimeLayout)+1:]
	if n, ok := strings.CutPrefix(rest, "_"); ok { // _001, _002, ...: a name taken in the same millisecond
		i := 0
		for i < len(n) && n[i] >= '0' && n[i] <= '9' {
			i++
		}
		if i < 3 || i > 9 {
			return false
		}
		rest = n[i:]
	}
	switch rest {
	case ".pcapng", ".pcapng.gz", ".pcapng.zst":
		return true
	}
	return false
}

// OwnFile reports whether name, in the directory of agent, is one the
// writer makes: a data file, finished or .part, its index (finished or
// .part, or being rebuilt: .idx.tmp), its flow file (finished or .part,
// or being rebuilt: .flows.<16 hex digits>.tmp), its timeline summary
// (.timeline, or being written: .timeline.tmp<digits>), or a repair's
// temporary file.
func OwnFile(agent, name string) bool {
	n := strings.TrimSuffix(strings.TrimSuffix(name, ".repair"), PartSuffix)
	if t, ok := strings.CutSuffix(n, index.Suffix+".tmp"); ok {
		n = t + index.Suffix
	}
	if index.IsIndex(n) {
		n = strings.TrimSuffix(strings.TrimSuffix(n, PartSuffix), index.Suffix)
	}
	if t, ok := strings.CutSuffix(n, ".tmp"); ok && len(t) > 17 && t[len(t)-17] == '.' && isHex(t[len(t)-16:]) {
		n = t[:len(t)-17]
	}
	if t, ok := strings.CutSuffix(n, flow.Suffix); ok {
		n = t
	}
	if t, digits, ok := strings.Cut(n, index.BinsSuffix+".tmp"); ok && digits != "" && strings.Trim(digits, "0123456789") == "" {
		n = t + index.BinsSuffix
	}
	if t, ok := strings.CutSuffix(n, index.BinsSuffix); ok {
		n = t
	}
	return IsDataFile(agent, n)
}

func isHex(s string) bool {
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// CodecOf returns the compression of a data file by its name (with or
// without PartSuffix).
func CodecOf(path string) compress.Codec {
	switch name := strings.TrimSuffix(path, PartSuffix); {
	case strings.HasSuffix(name, ".pcapng.gz"):
		return compress.Gzip
	case strings.HasSuffix(name, ".pcapng.zst"):
		return compress.Zstd
	}
	return compress.None
}

// IndexBytes returns the size of the index (index.Path) and of the flow
// file (flow.Path) of the data file at path, 0 for one it does not have
// or that is not a regular file. Retention counts a file with these
// bytes (not its timeline summary, index.BinsPath: a few KiB written
// after the file is published).
func IndexBytes(path string) int64 {
	var n int64
	for _, p := range []string{index.Path(path), flow.Path(path)} {
		if st, err := os.Lstat(p); err == nil && st.Mode().IsRegular() {
			n += st.Size()
		}
	}
	return n
}

// IfaceName is the name the read side gives an interface named name in
// a file of agent's directory: the name as the store writes it,
// "AGENT:IF"; a name without that prefix (a file the store did not
// write, or copied from another agent's directory) gets it, and an
// interface without a name is "AGENT:". So no two agents' interfaces
// share a name in a merged output, each packet stays its agent's, and
// --iface selects foreign files' interfaces as it does the store's.
func IfaceName(agent, name string) string {
	if len(name) > len(agent) && name[len(agent)] == ':' && strings.HasPrefix(name, agent) {
		return name
	}
	return agent + ":" + name
}

// MatchIface reports whether an interface named full ("AGENT:IF", as the
// data files name them) matches one of patterns (path.Match globs): a
// pattern with a ':' over the whole name, one without over the part after
// the agent's. No patterns match every interface. Query and flows select
// interfaces with it alike.
func MatchIface(patterns []string, full string) bool {
	if len(patterns) == 0 {
		return true
	}
	_, ifname, _ := strings.Cut(full, ":")
	return slices.ContainsFunc(patterns, func(p string) bool {
		name := ifname
		if strings.Contains(p, ":") {
			name = full
		}
		ok, _ := path.Match(p, name)
		return ok
	})
}
