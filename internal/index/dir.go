package index

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pcapsync/pcapsync/internal/safefs"
)

// DirReport is what RebuildDir found and did.
type DirReport struct {
	Files   int   `json:"files"`       // closed data files found
	Valid   int   `json:"valid"`       // their index verified: left alone
	Built   int   `json:"built"`       // had no index: one was built
	Rebuilt int   `json:"rebuilt"`     // had a damaged, stale or unfinished index: built again
	Gone    int   `json:"gone"`        // deleted (by retention) while being indexed
	Failed  int   `json:"failed"`      // could not be indexed (see Errors)
	Orphans int   `json:"orphans"`     // indexes without a data file, removed
	Temps   int   `json:"temps"`       // indexes' temporary files of an interrupted run, removed
	Foreign int   `json:"foreign"`     // files named like indexes that this did not make: left alone
	Bytes   int64 `json:"index_bytes"` // bytes of the indexes written

	// With a Sidecar (RebuildDirWith): sidecars missing or unsound,
	// built again (with their file's index), and their bytes.
	Sidecars     int   `json:"sidecars_built,omitempty"`
	SidecarBytes int64 `json:"sidecar_bytes,omitempty"`
	// Sidecars without a data file, and temporary files of an
	// interrupted run, removed (Orphans and Temps count indexes only).
	SidecarOrphans int `json:"sidecar_orphans,omitempty"`
	SidecarTemps   int `json:"sidecar_temps,omitempty"`
	// Timeline summaries (FILE.timeline, WriteBins) written for closed
	// files with a sound index and none sound, their bytes, and those
	// removed: whose data file is gone, or temporary files left by an
	// interrupted write.
	Timelines      int   `json:"timelines_built,omitempty"`
	TimelineBytes  int64 `json:"timeline_bytes,omitempty"`
	TimelineOrphan int   `json:"timeline_orphans,omitempty"`

	Errors       []string `json:"errors,omitempty"`        // the first maxErrors failures
	ForeignFiles []string `json:"foreign_files,omitempty"` // the first maxErrors foreign files
}

const maxErrors = 20

// errSidecar: the index verified, its data file's sidecar did not.
var errSidecar = errors.New("sidecar unsound")

// isData reports whether name is a closed data file of a store.
func isData(name string) bool {
	return !strings.HasPrefix(name, ".") &&
		(strings.HasSuffix(name, ".pcapng") || strings.HasSuffix(name, ".pcapng.gz") || strings.HasSuffix(name, ".pcapng.zst"))
}

// tempAge is how old a temporary file of WriteFile must be for
// RebuildDir to take it as left by an interrupted run: WriteFile
// renames its file as soon as it is written.
const tempAge = time.Minute

// RebuildDir walks dir (an output root, or one agent's directory) and
// gives every closed data file a valid index: files whose index is
// missing, does not verify (Open: damaged, stale, untrusted, or a
// link, FIFO or device in its place) or is of a version before
// WideVersion (Index.KeysWide: its filters may miss packets) are indexed (Build, blocks of
// blockBytes; 0: DefaultBlockBytes) and the index written in place
// (WriteFile); indexes whose data file is gone are removed. Files still
// being written (".part") and hidden directories are left alone, and
// links are never followed: the walk does not enter linked directories,
// and an index is created only where no directory below dir is a link. It is idempotent, and safe to run beside a
// store writing and deleting files in dir. It stops when ctx ends; the
// error is then ctx's, and only a failure to walk dir otherwise.
//
// It deletes only files it made: an index without a data file only if
// it is a regular file named after a data file (<name>.pcapng.idx, ...)
// whose header names that data file, and a temporary file only if it
// is a regular file named as WriteFile names them, older than tempAge.
// Other files named like indexes are left alone and counted in
// Foreign (listed in ForeignFiles).
func RebuildDir(ctx context.Context, dir string, blockBytes int) (DirReport, error) {
	return RebuildDirWith(ctx, dir, blockBytes, nil)
}

// A Sidecar is a file beside a data file built from its packets with
// the block numbers of its index (package flow's records), which
// RebuildDirWith checks and rebuilds.
type Sidecar interface {
	// Valid reports whether the sidecar of the closed data file at
	// path is there and sound.
	Valid(path string) bool
	// Start begins a sidecar of the data file at path: the function
	// returned is given its packets (BuildFunc).
	Start(path string) PacketFunc
	// Finish returns the bytes of the sidecar started last.
	Finish() []byte
	// Write writes b as the sidecar of the data file rel below root,
	// where no directory below root may be a link.
	Write(root, rel string, b []byte) error
	// Names reports whether name (a base name) is named as the
	// sidecar's files are: the sidecar of the data file dataName, or
	// (temp) a temporary file of one as Write names them.
	Names(name string) (dataName string, temp, ok bool)
	// MadeFor reports whether the file at path is a regular file whose
	// header names the data file dataName: a sidecar it made.
	MadeFor(path, dataName string) bool
}

// RebuildDirWith is RebuildDir that also gives every closed data file
// a sound sidecar (side; nil: none), and removes the sidecars whose
// data file is gone and the sidecars' temporary files of an
// interrupted run as it removes indexes and theirs (counted apart, in
// SidecarOrphans and SidecarTemps; only files the sidecar made: Sidecar.Names and
// Sidecar.MadeFor): a data file whose sidecar is
// missing or unsound (Sidecar.Valid), or whose index is rebuilt, is
// read once, for its sidecar and its index together, and both are
// written, the index even where it was valid, so that the sidecar's
// block numbers are its index's.
func RebuildDirWith(ctx context.Context, dir string, blockBytes int, side Sidecar) (DirReport, error) {
	var rep DirReport
	fail := func(path string, err error) {
		rep.Failed++
		if len(rep.Errors) < maxErrors {
			rep.Errors = append(rep.Errors, fmt.Sprintf("%s: %v", path, err))
		}
	}
	foreign := func(path string) {
		rep.Foreign++
		if len(rep.ForeignFiles) < maxErrors {
			rep.ForeignFiles = append(rep.ForeignFiles, path)
		}
	}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && path != dir {
				return nil // removed meanwhile
			}
			return err
		}
		name := d.Name()
		var sideData string
		var sideTemp, sideName bool
		if side != nil && !d.IsDir() {
			sideData, sideTemp, sideName = side.Names(name)
		}
		switch {
		case d.IsDir():
			if path != dir && strings.HasPrefix(name, ".") {
				return filepath.SkipDir
			}
			return nil
		case sideName && sideTemp:
			switch {
			case !d.Type().IsRegular():
				foreign(path)
			case stale(d) && os.Remove(path) == nil: // left by an interrupted run
				rep.SidecarTemps++
			}
			return nil
		case sideName:
			stem := filepath.Join(filepath.Dir(path), sideData)
			switch {
			case !isData(sideData):
				foreign(path)
			case exists(stem) || exists(stem+partSuffix):
				// Its data file's turn checks it.
			case !side.MadeFor(path, sideData):
				foreign(path)
			case os.Remove(path) == nil:
				rep.SidecarOrphans++
			}
			return nil
		case strings.HasSuffix(name, BinsSuffix) || strings.Contains(name, BinsSuffix+tempSuffix):
			rep.binsFile(path, name, foreign)
			return nil
		case strings.HasSuffix(name, Suffix+tempSuffix) || strings.Contains(name, Suffix+".") && strings.HasSuffix(name, tempSuffix):
			switch {
			case !isTempName(name) || !d.Type().IsRegular():
				foreign(path)
			case stale(d) && os.Remove(path) == nil: // left by an interrupted run
				rep.Temps++
			}
			return nil
		case strings.HasSuffix(name, Suffix):
			stem := strings.TrimSuffix(path, Suffix)
			switch {
			case !isData(filepath.Base(stem)):
				foreign(path)
			case exists(stem) || exists(stem+partSuffix):
				// Its data file's turn checks it.
			case !madeFor(path, filepath.Base(stem)):
				foreign(path)
			case os.Remove(path) == nil:
				rep.Orphans++
			}
			return nil
		case !d.Type().IsRegular() || !isData(name):
			return nil
		}
		rep.Files++
		ix, oerr := Open(path)
		ixOK := oerr == nil && ix.KeysWide()
		// A sidecar names the blocks of the index beside it: one beside
		// an index rebuilt is rebuilt too.
		sideOK := side == nil || ixOK && side.Valid(path)
		switch {
		case ixOK && sideOK:
			rep.Valid++
			rep.ensureBins(path)
			return nil
		case ixOK:
			oerr = errSidecar
		case oerr == nil:
			oerr = ErrVersion // sound, but its filters may miss packets: rebuilt
		}
		var each PacketFunc
		if !sideOK {
			each = side.Start(path)
		}
		b, err := BuildFunc(ctx, path, blockBytes, each)
		switch {
		case err != nil && !exists(path):
			rep.Gone++
			return nil
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			fail(path, err)
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err == nil {
			err = writeIn(dir, rel, b)
		}
		var sb []byte
		if err == nil && !sideOK {
			sb = side.Finish()
			err = side.Write(dir, rel, sb)
		}
		if err != nil {
			fail(path, err)
			return nil
		}
		if !sideOK {
			rep.Sidecars++
			rep.SidecarBytes += int64(len(sb))
		}
		if !exists(path) { // deleted while it was indexed: so is its index
			os.Remove(Path(path))
			rep.Gone++
			return nil
		}
		rep.Bytes += int64(len(b))
		switch {
		case errors.Is(oerr, errSidecar): // the index was valid: written again for its sidecar
			rep.Valid++
		case errors.Is(oerr, fs.ErrNotExist):
			rep.Built++
		default:
			rep.Rebuilt++
		}
		rep.ensureBins(path)
		return nil
	})
	return rep, err
}

// stale reports whether d was last written more than tempAge ago.
func stale(d fs.DirEntry) bool {
	fi, err := d.Info()
	return err == nil && time.Since(fi.ModTime()) > tempAge
}

// madeFor reports whether the file at path is a regular file that
// starts with the verified header of an index of the data file name.
func madeFor(path, name string) bool {
	f, err := safefs.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	b := make([]byte, headerFixed+len(name)+4)
	if _, err := io.ReadFull(f, b); err != nil {
		return false
	}
	got, ok := headerName(b)
	return ok && got == name
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return !errors.Is(err, fs.ErrNotExist)
}

// ensureBins writes the timeline summary of the closed data file at
// path, whose index is sound, unless it has a sound one. A failure
// (the file's packets span too long, the write failed) leaves it
// without one: a timeline reads its index instead.
func (rep *DirReport) ensureBins(path string) {
	if _, err := OpenBins(path); err == nil {
		return
	}
	if n, err := WriteBins(path); err == nil {
		rep.Timelines++
		rep.TimelineBytes += int64(n)
	}
}

// binsFile handles a file named as a timeline summary or its
// temporary file (safefs.WriteReplace: FILE.timeline.tmp<digits>):
// a summary whose data file is gone is removed if its header names
// that file, a temporary file left by an interrupted write once stale;
// anything else so named is foreign.
func (rep *DirReport) binsFile(path, name string, foreign func(string)) {
	st, err := os.Lstat(path)
	if err != nil {
		return
	}
	if stem, digits, ok := strings.Cut(name, BinsSuffix+tempSuffix); ok {
		switch {
		case !st.Mode().IsRegular() || !isData(stem) || digits == "" || strings.Trim(digits, "0123456789") != "":
			foreign(path)
		case time.Since(st.ModTime()) > tempAge && os.Remove(path) == nil:
			rep.TimelineOrphan++
		}
		return
	}
	stem := strings.TrimSuffix(path, BinsSuffix)
	if !isData(filepath.Base(stem)) || !st.Mode().IsRegular() || st.Size() > maxBinsSize {
		foreign(path)
		return
	}
	if exists(stem) || exists(stem+partSuffix) {
		return // its data file's turn checks it
	}
	p, err := os.ReadFile(path)
	if err != nil {
		return
	}
	if b, err := ParseBins(p); err != nil || b.Name != filepath.Base(stem) {
		foreign(path)
		return
	}
	if os.Remove(path) == nil {
		rep.TimelineOrphan++
	}
}
