// Package flowfile reads and builds the flow file beside a data file
// (package flow's format, docs/flows.md) from outside the store: Read
// opens one as hostile input, Build makes one from a data file's
// packets with the block numbers of the index built in the same pass,
// and RebuildDir gives every closed data file of an output root a
// sound flow file and index (pcapsync index).
package flowfile

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/pcapsync/pcapsync/internal/flow"
	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/safefs"
)

// MaxFileBytes bounds the size of a flow file read: about 3.5 M records,
// far more than a data file of the store's largest rotation holds.
const MaxFileBytes = 256 << 20

// Read reads and parses the flow file of the data file at dataPath
// (flow.Path): never through a link, only a regular file, at most
// MaxFileBytes. Its error is Parse's (the records that verify are
// returned with flow.ErrDamaged) or the file's.
func Read(dataPath string) (*flow.File, error) {
	b, err := safefs.ReadFile(flow.Path(dataPath), MaxFileBytes)
	if err != nil {
		return nil, err
	}
	return flow.Parse(b)
}

// Sound reports whether the data file at dataPath, closed, has a flow
// file that verifies whole, with its end record, naming it.
func Sound(dataPath string) bool {
	f, err := Read(dataPath)
	return err == nil && f.Final && f.Name == filepath.Base(dataPath)
}

// Sidecar builds flow files for index.RebuildDirWith: a flow table per
// data file, records for its packets alone (a flow going on from the
// file before starts at part 0 here, and its initiator is this file's
// first sender unless a SYN says otherwise).
type Sidecar struct {
	cfg   flow.Config
	t     *flow.Table
	name  string
	key   flow.Key
	bad   error
	bytes []byte
}

// NewSidecar returns a Sidecar whose tables have cfg (nil: defaults).
func NewSidecar(cfg *flow.Config) (*Sidecar, error) {
	s := &Sidecar{}
	if cfg != nil {
		s.cfg = *cfg
	}
	if err := s.cfg.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}

// Valid is Sound.
func (s *Sidecar) Valid(path string) bool { return Sound(path) }

// Start begins the flow file of the data file at path.
func (s *Sidecar) Start(path string) index.PacketFunc {
	s.name = filepath.Base(strings.TrimSuffix(path, ".part"))
	s.t, s.bad = flow.NewTable(&s.cfg) // validated by NewSidecar
	return s.packet
}

func (s *Sidecar) packet(iface, linkType uint32, ts int64, origLen, capLen uint32, data []byte, block int) {
	p := flow.Decode(&s.key, linkType, iface, data)
	s.t.AddKey(&s.key, p, ts, origLen, capLen, uint32(block))
}

// Finish returns the flow file of the data file started last: every
// record, a record of every flow still going at its end (end "open"),
// and the end record.
func (s *Sidecar) Finish() []byte {
	var e flow.Encoder
	b := e.AppendHeader(s.bytes[:0], s.name)
	if s.bad != nil {
		return b
	}
	s.t.Rotate()
	recs := s.t.Records()
	for i := range recs {
		b = e.AppendRecord(b, &recs[i])
	}
	b = e.AppendEnd(b, s.t.Counters().Evicted)
	s.bytes = b
	return b
}

// Write writes b as the flow file of the data file rel below root: a
// temporary file created exclusively (no directory below root a link),
// renamed over whatever has the flow file's name.
func (s *Sidecar) Write(root, rel string, b []byte) error {
	var r [8]byte
	rand.Read(r[:])
	tmp := flow.Path(rel) + "." + hex.EncodeToString(r[:]) + ".tmp"
	f, err := safefs.OpenIn(root, tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return err
	}
	tmp = filepath.Join(root, tmp)
	_, err = f.Write(b)
	err = errors.Join(err, f.Close())
	if err == nil {
		err = os.Rename(tmp, flow.Path(filepath.Join(root, rel)))
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// Names reports whether name is a flow file's (flow.Suffix) or one of
// Write's temporary files' (<flow file>.<16 hex digits>.tmp), and the
// data file it is of.
func (s *Sidecar) Names(name string) (dataName string, temp, ok bool) {
	if data, ok := strings.CutSuffix(name, flow.Suffix); ok {
		return data, false, data != ""
	}
	rest, ok := strings.CutSuffix(name, ".tmp")
	if !ok || len(rest) < 17 || rest[len(rest)-17] != '.' {
		return "", false, false
	}
	if _, err := hex.DecodeString(rest[len(rest)-16:]); err != nil {
		return "", false, false
	}
	data, ok := strings.CutSuffix(rest[:len(rest)-17], flow.Suffix)
	return data, true, ok && data != ""
}

// MadeFor reports whether the file at path is a regular flow file
// (never through a link) whose header verifies and names dataName.
func (s *Sidecar) MadeFor(path, dataName string) bool {
	b, err := safefs.ReadFile(path, MaxFileBytes)
	if err != nil {
		return false
	}
	f, _ := flow.Parse(b)
	return f != nil && f.Name == dataName
}

// Build reads the data file at path once and returns its index (blocks
// of blockBytes; 0: index.DefaultBlockBytes) and its flow file, whose
// records name that index's blocks.
func Build(ctx context.Context, path string, blockBytes int) (ix, flows []byte, err error) {
	s, _ := NewSidecar(nil)
	ix, err = index.BuildFunc(ctx, path, blockBytes, s.Start(path))
	if err != nil {
		return nil, nil, err
	}
	return ix, s.Finish(), nil
}

// RebuildDir is index.RebuildDir that also rebuilds every missing or
// unsound flow file, with its index (index.RebuildDirWith).
func RebuildDir(ctx context.Context, dir string, blockBytes int) (index.DirReport, error) {
	s, _ := NewSidecar(nil)
	return index.RebuildDirWith(ctx, dir, blockBytes, s)
}
