package layout

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/pcapsync/pcapsync/internal/safefs"
)

// IndexDoc is retention's saved index of one agent's closed files
// (RetainDir/<agent>.json).
type IndexDoc struct {
	Version int           `json:"version"` // 1
	Files   []IndexedFile `json:"files"`
}

// IndexedFile is a closed data file as retention's index lists it.
type IndexedFile struct {
	Name  string `json:"name"`
	Bytes int64  `json:"bytes"` // the file's size and its index's
	Mod   int64  `json:"mod"`   // Unix ns of the file's modification time
	First int64  `json:"first"` // Unix ns of its first (earliest) packet
	Last  int64  `json:"last"`  // Unix ns of its last (latest) packet
}

// Limits of retention's saved index (RetainDir/<agent>.json), which
// anyone who can write the root can write: a larger file is not read,
// more entries are not kept.
const (
	maxIndexDoc   = 64 << 20
	maxIndexFiles = 1 << 20
)

// ParseIndex parses a saved index of agent's closed files and returns
// its entries by name. Each entry kept is valid (validEntry): a data
// file name of agent, bytes and modification time positive, first
// packet not after the last; the others are dropped (bad counts them).
// A document that is not JSON of version 1, or lists more than
// maxIndexFiles files, is an error. An entry is still only a claim about
// a file: its user checks that the file has its size and modification
// time before it trusts its times.
func ParseIndex(b []byte, agent string) (m map[string]IndexedFile, bad int, err error) {
	if len(b) > maxIndexDoc {
		return nil, 0, fmt.Errorf("saved index of %d bytes, limit %d", len(b), maxIndexDoc)
	}
	var doc IndexDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, 0, fmt.Errorf("saved index: %w", err)
	}
	switch {
	case doc.Version != 1:
		return nil, 0, fmt.Errorf("saved index: version %d, want 1", doc.Version)
	case len(doc.Files) > maxIndexFiles:
		return nil, 0, fmt.Errorf("saved index: %d files, limit %d", len(doc.Files), maxIndexFiles)
	}
	m = make(map[string]IndexedFile, len(doc.Files))
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
func validEntry(agent string, f IndexedFile) bool {
	return IsDataFile(agent, f.Name) && f.Bytes > 0 && f.Mod > 0 && f.First <= f.Last
}

// ReadIndex reads and parses (ParseIndex) agent's saved index below
// root: a regular file, not a link, FIFO or device, in a RetainDir that
// is not a link, of at most maxIndexDoc bytes. A missing one is an
// error matching fs.ErrNotExist.
func ReadIndex(root, agent string) (map[string]IndexedFile, error) {
	if err := safefs.Dir(filepath.Join(root, RetainDir)); err != nil {
		return nil, err
	}
	b, err := safefs.ReadFile(filepath.Join(root, RetainDir, agent+".json"), maxIndexDoc)
	if err != nil {
		return nil, err
	}
	m, bad, err := ParseIndex(b, agent)
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

// errBadEntries: ReadIndex's map holds the valid entries only.
var errBadEntries = errors.New("invalid entries")
