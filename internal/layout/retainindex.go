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
	// Removed is what retention has removed of the agent's files since
	// the record began (optional: readers before it ignore it, and a
	// document without it records nothing removed).
	Removed *Removed `json:"removed,omitempty"`
}

// Removed is what retention has removed of an agent's files, kept
// across restarts in its saved index: how many files and bytes (with
// their indexes), and the oldest and newest packet among them (Unix
// ns). The zero value records nothing removed.
type Removed struct {
	Files   int64 `json:"files"`
	Bytes   int64 `json:"bytes"`
	From    int64 `json:"from"`    // the oldest packet of the files removed
	Through int64 `json:"through"` // the newest: packets up to it may be gone
}

// Add records f removed.
func (r *Removed) Add(f IndexedFile) {
	if r.Files == 0 {
		r.From, r.Through = f.First, f.Last
	}
	r.Files++
	r.Bytes += f.Bytes
	r.From = min(r.From, f.First)
	r.Through = max(r.Through, f.Last)
}

// Merge merges o, another process's record of the same agent's
// removals (a shared root): the larger counts, the wider times, so the
// result is at least what either saw.
func (r *Removed) Merge(o Removed) {
	if o.Files == 0 {
		return
	}
	if r.Files == 0 {
		*r = o
		return
	}
	r.Files, r.Bytes = max(r.Files, o.Files), max(r.Bytes, o.Bytes)
	r.From, r.Through = min(r.From, o.From), max(r.Through, o.Through)
}

// Valid reports whether r can be a record of removals: none, or at
// least one file, bytes not negative, From not after Through.
func (r Removed) Valid() bool {
	return r == Removed{} || r.Files > 0 && r.Bytes >= 0 && r.From <= r.Through
}

// Index is a saved index parsed: the valid entries by name and the
// record of removals (zero when there is none or it is not valid).
type Index struct {
	Files   map[string]IndexedFile
	Removed Removed
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
	ix, bad, err := ParseIndexDoc(b, agent)
	return ix.Files, bad, err
}

// ParseIndexDoc is ParseIndex that also returns the record of
// removals: one that is not Valid is dropped (counted in bad) and the
// Index's is zero.
func ParseIndexDoc(b []byte, agent string) (ix Index, bad int, err error) {
	if len(b) > maxIndexDoc {
		return Index{}, 0, fmt.Errorf("saved index of %d bytes, limit %d", len(b), maxIndexDoc)
	}
	var doc IndexDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		return Index{}, 0, fmt.Errorf("saved index: %w", err)
	}
	switch {
	case doc.Version != 1:
		return Index{}, 0, fmt.Errorf("saved index: version %d, want 1", doc.Version)
	case len(doc.Files) > maxIndexFiles:
		return Index{}, 0, fmt.Errorf("saved index: %d files, limit %d", len(doc.Files), maxIndexFiles)
	}
	m := make(map[string]IndexedFile, len(doc.Files))
	for _, f := range doc.Files {
		if _, dup := m[f.Name]; dup || !validEntry(agent, f) {
			bad++
			continue
		}
		m[f.Name] = f
	}
	ix.Files = m
	if doc.Removed != nil {
		if doc.Removed.Valid() {
			ix.Removed = *doc.Removed
		} else {
			bad++
		}
	}
	return ix, bad, nil
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
	ix, err := ReadIndexDoc(root, agent)
	return ix.Files, err
}

// ReadIndexDoc is ReadIndex that also returns the record of removals
// (ParseIndexDoc).
func ReadIndexDoc(root, agent string) (Index, error) {
	if err := safefs.Dir(filepath.Join(root, RetainDir)); err != nil {
		return Index{}, err
	}
	b, err := safefs.ReadFile(filepath.Join(root, RetainDir, agent+".json"), maxIndexDoc)
	if err != nil {
		return Index{}, err
	}
	ix, bad, err := ParseIndexDoc(b, agent)
	if err == nil && bad > 0 {
		err = fmt.Errorf("saved index of %q: %d entries invalid, ignored: %w", agent, bad, errBadEntries)
	}
	return ix, err
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
