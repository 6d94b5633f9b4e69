package layout

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pcapsync/pcapsync/internal/safefs"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// FileInfo is one data file of an agent as a reader of the root (a
// query) finds it.
type FileInfo struct {
	Path string // Dir/<agent>/<name>
	Size int64
	// Part: the file is being written (or was left unfinished by a
	// crash and not repaired yet). Only its first CompleteLength bytes
	// (decompressed) are whole batches.
	Part bool
	// Times: First and Last hold the Unix ns of the file's earliest and
	// latest packet, from retention's index (RetainDir), which lists the
	// file with this very size and modification time (an entry that
	// does not match is not trusted). Never set for a Part.
	Times       bool
	First, Last int64
}

// Agents lists the agent directories of the output root dir, sorted by
// name: directories (a link is not one: never followed) whose name is a
// valid agent name (wire.ValidateName), which keeps out the writer's
// own (OwnPrefix) and anything else someone put there. It opens no
// file; a directory listed may be removed before the caller reads it.
func Agents(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		if e.IsDir() && wire.ValidateName(e.Name()) == nil {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// AgentFiles lists the data files of agent below dir in the order the
// Store wrote them (by name: <agent>_<UTC start>[_NNN].pcapng..., with
// PartSuffix ignored), with their times where retention's index has
// them. It does not open the files. Only the files the Store names
// (IsDataFile) are listed, never through a link: an agent directory
// that is a link is refused (ErrAgentDir). A missing agent directory is
// an error matching fs.ErrNotExist. Files listed may be removed
// (retention) or renamed (a .part published) before the caller opens
// them.
func AgentFiles(dir, agent string) ([]FileInfo, error) {
	l, err := ListAgent(dir, agent)
	return l.Files, err
}

// Listing is an agent's data files as ListAgent finds them.
type Listing struct {
	Files []FileInfo // as AgentFiles lists them
	// Removed is what retention's saved index records it removed of
	// the agent's files (zero: nothing, or no saved index).
	Removed Removed
	// IndexErr is why retention's saved index could not be read or
	// held invalid entries (nil: read, or there is none): the files
	// it would have given times for have none.
	IndexErr error
	// NotRegular names the entries named as data files (a .part
	// included) that are not regular files (a link, a FIFO): not
	// listed, never opened.
	NotRegular []string
}

// ListAgent is AgentFiles that also returns what retention's saved
// index records of removals and the entries left out.
func ListAgent(dir, agent string) (Listing, error) {
	if err := safefs.Dir(filepath.Join(dir, agent)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Listing{}, err
		}
		return Listing{}, fmt.Errorf("agent %q: %w: %w", agent, ErrAgentDir, err)
	}
	ents, err := os.ReadDir(filepath.Join(dir, agent))
	if err != nil {
		return Listing{}, err
	}
	ix, ierr := ReadIndexDoc(dir, agent) // a cache: without it, the files are read
	if errors.Is(ierr, fs.ErrNotExist) {
		ierr = nil
	}
	idx := ix.Files
	var out []FileInfo
	var odd []string
	for _, e := range ents {
		name, part := strings.CutSuffix(e.Name(), PartSuffix)
		if !IsDataFile(agent, name) {
			continue
		}
		if !e.Type().IsRegular() {
			odd = append(odd, e.Name())
			continue
		}
		info, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // gone since the listing: as if listed a moment later
		}
		if err != nil {
			return Listing{}, fmt.Errorf("listing %s: %w", agent, err)
		}
		fi := FileInfo{Path: filepath.Join(dir, agent, e.Name()), Size: info.Size(), Part: part}
		// Retention counts a file with its index (sidecar) bytes.
		if f, ok := idx[name]; ok && !part && f.Bytes == fi.Size+IndexBytes(fi.Path) && f.Mod == info.ModTime().UnixNano() {
			fi.Times, fi.First, fi.Last = true, f.First, f.Last
		}
		out = append(out, fi)
	}
	slices.SortFunc(out, func(a, b FileInfo) int {
		return strings.Compare(strings.TrimSuffix(a.Path, PartSuffix), strings.TrimSuffix(b.Path, PartSuffix))
	})
	return Listing{Files: out, Removed: ix.Removed, IndexErr: ierr, NotRegular: odd}, nil
}

// CompleteLength reads the data file at path (plain, gzip or zstd, by
// its name) as repair does and returns the length of its decompressed
// pcapng stream up to the end of its last complete batch (a batch mark,
// and the interface and statistics blocks after it): what a reader of a
// file still being written may read. 0 means no complete batch yet. The
// file may grow meanwhile; what follows the returned length is not
// looked at.
//
// The file is opened as safefs.Open does: a link, FIFO or device in its
// place fails at once (safefs.ErrLink, safefs.ErrNotRegular).
func CompleteLength(ctx context.Context, path string) (int64, error) {
	f, err := safefs.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc, err := Scan(ctx, f, CodecOf(path))
	if err != nil {
		return 0, fmt.Errorf("scanning %s: %w", path, err)
	}
	return sc.Raw, nil
}
