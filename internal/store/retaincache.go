package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/pcapsync/pcapsync/internal/safefs"
)

// Limits of retention's saved index (RetainDir/<agent>.json), which
// anyone who can write the root can write: a larger file is not read,
// more entries are not kept.
const (
	maxIndexDoc   = 64 << 20
	maxIndexFiles = 1 << 20
)

// parseIndex parses a saved index of agent's closed files and returns
// its entries by name. Each entry kept is valid (validEntry): a data
// file name of agent, bytes and modification time positive, first
// packet not after the last; the others are dropped (bad counts them).
// A document that is not JSON of version 1, or lists more than
// maxIndexFiles files, is an error. An entry is still only a claim about
// a file: its user checks that the file has its size and modification
// time before it trusts its times.
func parseIndex(b []byte, agent string) (m map[string]retFile, bad int, err error) {
	if len(b) > maxIndexDoc {
		return nil, 0, fmt.Errorf("saved index of %d bytes, limit %d", len(b), maxIndexDoc)
	}
	var doc indexDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, 0, fmt.Errorf("saved index: %w", err)
	}
	switch {
	case doc.Version != 1:
		return nil, 0, fmt.Errorf("saved index: version %d, want 1", doc.Version)
	case len(doc.Files) > maxIndexFiles:
		return nil, 0, fmt.Errorf("saved index: %d files, limit %d", len(doc.Files), maxIndexFiles)
	}
	m = make(map[string]retFile, len(doc.Files))
	for _, f := range doc.Files {
		if _, dup := m[f.Name]; dup || !validEntry(agent, f) {
			bad++
			continue
		}
		m[f.Name] = f
	}
	return m, bad, nil
}

// validEntry reports whether f can describe a closed data file of agent.
func validEntry(agent string, f retFile) bool {
	return IsDataFile(agent, f.Name) && f.Bytes > 0 && f.Mod > 0 && f.First <= f.Last
}

// readIndex reads and parses (parseIndex) agent's saved index below
// root: a regular file, not a link, FIFO or device, in a RetainDir that
// is not a link, of at most maxIndexDoc bytes. A missing one is an
// error matching fs.ErrNotExist.
func readIndex(root, agent string) (map[string]retFile, error) {
	if err := safefs.Dir(filepath.Join(root, RetainDir)); err != nil {
		return nil, err
	}
	b, err := safefs.ReadFile(filepath.Join(root, RetainDir, agent+".json"), maxIndexDoc)
	if err != nil {
		return nil, err
	}
	m, bad, err := parseIndex(b, agent)
	if err == nil && bad > 0 {
		err = fmt.Errorf("saved index of %q: %d entries invalid, ignored: %w", agent, bad, errBadEntries)
	}
	return m, err
}

// RetainIndexReadable reports whether agent's saved retention index
// below root (RetainDir/<agent>.json), which AgentFiles reads for the
// files' times, can be opened by this process: nil when it can or when
// there is none, else the error (fs.ErrPermission for one the user may
// not read, such as the 0600 files collectors before 0640 wrote). It
// opens the file without reading it.
func RetainIndexReadable(root, agent string) error {
	f, err := safefs.Open(filepath.Join(root, RetainDir, agent+".json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return f.Close()
}

// errBadEntries: readIndex's map holds the valid entries only.
var errBadEntries = errors.New("invalid entries")

// ensureDir makes the directory path, one element below the root,
// unless it is there, and checks that it is a directory and not a link.
func ensureDir(path string) error {
	if err := os.Mkdir(path, 0o750); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return safefs.Dir(path)
}
