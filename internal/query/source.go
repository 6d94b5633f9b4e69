package query

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/store"
)

// A source yields the packets of one file in file order. An index can
// later narrow a source to byte ranges of its file; the merge does not
// care where the packets come from.
type source interface {
	// next reads the next packet into p; p.Data is valid until the next
	// call. At the end it returns io.EOF.
	next(p *pcapfile.Packet) error
	// interfaces is the file's interfaces so far, indexed by
	// p.Interface.
	interfaces() []pcapfile.Interface
	close() error
}

// fileSource reads a whole data file (plain, gzip or zstd), or a .part
// up to its last complete batch.
type fileSource struct {
	rc io.ReadCloser
	r  *pcapfile.Reader
}

// openFile opens fi for reading. A .part is first scanned for the end
// of its last complete batch (store.CompleteLength) and read up to
// there; one published (renamed) since the listing is read whole under
// its new name. A file gone otherwise is ErrFileGone. onStats receives
// the file's statistics blocks. It returns a nil source for a .part
// without a complete batch.
func openFile(ctx context.Context, fi store.FileInfo, onStats func(int, pcapfile.InterfaceStats)) (source, error) {
	path, limit := fi.Path, int64(-1)
	if fi.Part {
		n, err := store.CompleteLength(ctx, path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			path = strings.TrimSuffix(path, store.PartSuffix) // published meanwhile
		case err != nil:
			return nil, err
		case n == 0:
			return nil, nil
		default:
			limit = n
		}
	}
	rc, err := pcapfile.Open(path)
	if errors.Is(err, fs.ErrNotExist) && path == fi.Path && fi.Part {
		// Published between the scan and here: the same bytes, and more.
		path = strings.TrimSuffix(path, store.PartSuffix)
		rc, err = pcapfile.Open(path)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", path, ErrFileGone)
	}
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	var src io.Reader = rc
	if limit >= 0 {
		src = io.LimitReader(rc, limit)
	}
	r, err := pcapfile.NewReader(src, &pcapfile.ReaderConfig{OnStats: onStats})
	if err != nil {
		rc.Close()
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return &fileSource{rc: rc, r: r}, nil
}

func (s *fileSource) next(p *pcapfile.Packet) error    { return s.r.ReadInto(p) }
func (s *fileSource) interfaces() []pcapfile.Interface { return s.r.Interfaces() }
func (s *fileSource) close() error                     { return s.rc.Close() }
