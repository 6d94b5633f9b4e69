package index

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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
	Bytes   int64 `json:"index_bytes"` // bytes of the indexes written

	Errors []string `json:"errors,omitempty"` // the first maxErrors failures
}

const maxErrors = 20

// isData reports whether name is a closed data file of a store.
func isData(name string) bool {
	return !strings.HasPrefix(name, ".") &&
		(strings.HasSuffix(name, ".pcapng") || strings.HasSuffix(name, ".pcapng.gz") || strings.HasSuffix(name, ".pcapng.zst"))
}

// RebuildDir walks dir (an output root, or one agent's directory) and
// gives every closed data file a valid index: files whose index is
// missing or does not verify (Open) are indexed (Build, blocks of
// blockBytes; 0: DefaultBlockBytes) and the index written in place
// (WriteFile); indexes whose data file is gone are removed. Files still
// being written (".part") and hidden directories are left alone. It is
// idempotent, and safe to run beside a store writing and deleting files
// in dir. It stops when ctx ends; the error is then ctx's, and only a
// failure to walk dir otherwise.
func RebuildDir(ctx context.Context, dir string, blockBytes int) (DirReport, error) {
	var rep DirReport
	fail := func(path string, err error) {
		rep.Failed++
		if len(rep.Errors) < maxErrors {
			rep.Errors = append(rep.Errors, fmt.Sprintf("%s: %v", path, err))
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
		switch {
		case d.IsDir():
			if path != dir && strings.HasPrefix(name, ".") {
				return filepath.SkipDir
			}
			return nil
		case !d.Type().IsRegular():
			return nil
		case strings.HasSuffix(name, Suffix+".tmp"):
			os.Remove(path) // left by an interrupted run
			return nil
		case strings.HasSuffix(name, Suffix):
			data := strings.TrimSuffix(path, Suffix)
			if !exists(data) && !exists(data+partSuffix) {
				if os.Remove(path) == nil {
					rep.Orphans++
				}
			}
			return nil
		case !isData(name):
			return nil
		}
		rep.Files++
		_, oerr := Open(path)
		if oerr == nil {
			rep.Valid++
			return nil
		}
		b, err := Build(ctx, path, blockBytes)
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
		if err := WriteFile(path, b); err != nil {
			fail(path, err)
			return nil
		}
		if !exists(path) { // deleted while it was indexed: so is its index
			os.Remove(Path(path))
			rep.Gone++
			return nil
		}
		rep.Bytes += int64(len(b))
		if errors.Is(oerr, fs.ErrNotExist) {
			rep.Built++
		} else {
			rep.Rebuilt++
		}
		return nil
	})
	return rep, err
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return !errors.Is(err, fs.ErrNotExist)
}
