package agent

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/pcapsync/pcapsync/internal/wire"
)

// spool is a write-through log of sealed batch frames on disk, so a
// collector outage of minutes, or a crash of the agent, loses nothing
// that was sealed. Layout of its directory:
//
//	instance                    the agent instance id, hex
//	seg-<first seq, 20 digits>  batch frames back to back, as sent
//	acked                       the last sequence number acknowledged when
//	                            the previous run stopped, decimal
//
// A segment is deleted once every batch in it is acknowledged, except the
// newest, which survives so that a restarted agent knows where its
// sequence numbers continue. acked, written when the agent stops
// (saveAcked), tells the next run which of the batches it loads were
// acknowledged already; it is only ever a lower bound (a crash leaves an
// older one, or none), so it decides what the agent reports, never what
// it sends: the collector's welcome does that. Writes are not synced: the spool survives a
// crash of the agent, not of the OS. Not safe for concurrent use: the
// queue's lock guards it (read only touches immutable data).
type spool struct {
	dir   string
	limit int64
	segs  []*segment
	bytes int64
	log   *slog.Logger
	// prevAcked: the acked file's number when the spool was opened, 0
	// if there was none.
	prevAcked uint64
}

// ackedFile is the name of the file saveAcked writes in the spool.
const ackedFile = "acked"

type segment struct {
	first, last uint64 // sequence range held
	f           *os.File
	size        int64
}

// segMax is the size at which a new segment starts.
const segMax = 64 << 20

// openSpool opens (creating) the spool in dir. With resume, batches left
// by a previous run are loaded and returned with the previous instance
// id; without it (a file replay, which starts its input over) they are
// discarded. A torn last frame, from a crash mid-write, is cut off.
func openSpool(dir string, limit int64, resume bool, log *slog.Logger) (*spool, [16]byte, []*batch, error) {
	var id [16]byte
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, id, nil, fmt.Errorf("agent: spool: %w", err)
	}
	s := &spool{dir: dir, limit: limit, log: log}
	names, err := filepath.Glob(filepath.Join(dir, "seg-*"))
	if err != nil {
		return nil, id, nil, err
	}
	sort.Strings(names)
	idFile := filepath.Join(dir, "instance")
	raw, idErr := os.ReadFile(idFile)
	if idErr == nil {
		_, idErr = hex.Decode(id[:], []byte(strings.TrimSpace(string(raw))))
	}
	if !resume || idErr != nil || len(names) == 0 {
		if len(names) > 0 {
			log.Warn("spool: discarding batches of a previous run", "segments", len(names), "reason", discardReason(resume, idErr))
		}
		for _, n := range names {
			os.Remove(n)
		}
		os.Remove(filepath.Join(dir, ackedFile)) // of the old instance
		names = nil
		id = newInstance()
		if err := writeFileSync(idFile, []byte(hex.EncodeToString(id[:])+"\n")); err != nil {
			return nil, id, nil, fmt.Errorf("agent: spool: %w", err)
		}
	}
	if len(names) > 0 {
		s.prevAcked = readAcked(filepath.Join(dir, ackedFile))
	}
	var recovered []*batch
	for _, n := range names {
		seg, bs, err := s.load(n)
		if err != nil {
			s.close()
			return nil, id, nil, err
		}
		if seg != nil {
			s.segs = append(s.segs, seg)
			s.bytes += seg.size
			recovered = append(recovered, bs...)
		}
	}
	return s, id, recovered, nil
}

// readAcked reads an acked file: 0 if it is missing or not a number.
func readAcked(path string) uint64 {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// saveAcked records acked, the last sequence number the collector
// acknowledged, for the next run (the acked file). An error is logged:
// the next run then reports more batches to resend than it does.
func (s *spool) saveAcked(acked uint64) {
	if err := writeFileSync(filepath.Join(s.dir, ackedFile), []byte(strconv.FormatUint(acked, 10)+"\n")); err != nil {
		s.log.Warn("spool: recording the acknowledged batches", "err", err)
	}
}

// unacked returns the batches of recovered (in sequence order) above
// the previous run's last acknowledged sequence number.
func (s *spool) unacked(recovered []*batch) []*batch {
	i := sort.Search(len(recovered), func(i int) bool { return recovered[i].seq > s.prevAcked })
	return recovered[i:]
}

func discardReason(resume bool, idErr error) string {
	switch {
	case !resume:
		return "a file replay starts its input over"
	case idErr != nil:
		return "no readable instance file"
	}
	return ""
}

// load reads a segment's frames, cutting a torn tail.
func (s *spool) load(path string) (*segment, []*batch, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("agent: spool: %w", err)
	}
	fr := wire.NewFrameReader(f, wire.Limits{MaxFrame: 1 << 30})
	seg := &segment{f: f}
	var out []*batch
	for {
		off := fr.Offset()
		h, p, err := fr.Next()
		if err == nil && h.Type != wire.TypeBatch {
			err = fmt.Errorf("%s frame: %w", h.Type, wire.ErrUnknownType)
		}
		var b wire.Batch
		if err == nil {
			// Batches are spooled as they were sealed, checked or not.
			b, err = wire.ParseBatch(h.Flags, p, wire.BatchLimits{Unchecked: true})
		}
		if err != nil {
			if err != io.EOF {
				s.log.Warn("spool: cutting a torn segment tail", "segment", path, "offset", off, "err", err)
			}
			if terr := f.Truncate(off); terr != nil {
				f.Close()
				return nil, nil, fmt.Errorf("agent: spool: %w", terr)
			}
			seg.size = off
			break
		}
		if seg.first == 0 {
			seg.first = b.Seq
		}
		seg.last = b.Seq
		out = append(out, &batch{seq: b.Seq, packets: uint64(b.Count), seg: seg, off: off, size: int(wire.HeaderSize + h.Length)})
	}
	if len(out) == 0 {
		f.Close()
		os.Remove(path)
		return nil, nil, nil
	}
	if _, err := f.Seek(seg.size, io.SeekStart); err != nil {
		return nil, nil, err
	}
	return seg, out, nil
}

// full reports whether n more bytes would exceed the limit.
func (s *spool) full(n int) bool { return s.bytes+int64(n) > s.limit }

// append writes a sealed frame and records where it is in b.
func (s *spool) append(b *batch, frame []byte) error {
	cur := s.current()
	if cur == nil || cur.size+int64(len(frame)) > segMax && cur.size > 0 {
		path := filepath.Join(s.dir, fmt.Sprintf("seg-%020d", b.seq))
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return fmt.Errorf("spool: %w", err)
		}
		cur = &segment{first: b.seq, f: f}
		s.segs = append(s.segs, cur)
	}
	if _, err := cur.f.Write(frame); err != nil {
		cur.f.Truncate(cur.size) // drop a partial frame
		cur.f.Seek(cur.size, io.SeekStart)
		return fmt.Errorf("spool: writing batch %d: %w", b.seq, err)
	}
	b.seg, b.off, b.size = cur, cur.size, len(frame)
	cur.last = b.seq
	cur.size += int64(len(frame))
	s.bytes += int64(len(frame))
	return nil
}

func (s *spool) current() *segment {
	if len(s.segs) == 0 {
		return nil
	}
	return s.segs[len(s.segs)-1]
}

// read returns b's frame from disk in dst's storage.
func (s *spool) read(b *batch, dst []byte) ([]byte, error) {
	if cap(dst) < b.size {
		dst = make([]byte, b.size)
	}
	dst = dst[:b.size]
	if _, err := b.seg.f.ReadAt(dst, b.off); err != nil {
		return nil, fmt.Errorf("spool: reading batch %d: %w", b.seq, err)
	}
	return dst, nil
}

// release deletes the segments whose batches are all acknowledged,
// keeping the newest.
func (s *spool) release(acked uint64) {
	n := 0
	for n < len(s.segs)-1 && s.segs[n].last <= acked {
		seg := s.segs[n]
		seg.f.Close()
		if err := os.Remove(seg.f.Name()); err != nil {
			s.log.Warn("spool: removing segment", "err", err)
		}
		s.bytes -= seg.size
		n++
	}
	s.segs = append(s.segs[:0], s.segs[n:]...)
}

func (s *spool) close() {
	for _, seg := range s.segs {
		seg.f.Close()
	}
}

func writeFileSync(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	return errors.Join(err, f.Sync(), f.Close())
}

// ChownSpool gives the spool directory dir and the spool's files in it
// (instance, acked, seg-*) to uid and gid, so that an agent started as root
// that switches to that user (--user) can go on writing it. It refuses
// a directory that holds anything else: --spool naming a directory
// that is not a spool must not hand that directory to a user. Nothing
// is followed: a symbolic link in the spool is an error.
func ChownSpool(dir string, uid, gid int) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("agent: spool: %w", err)
	}
	for _, e := range ents {
		if n := e.Name(); !e.Type().IsRegular() || n != "instance" && n != ackedFile && !strings.HasPrefix(n, "seg-") {
			return fmt.Errorf("agent: spool %s holds %q, which is no spool file: not handing it to uid %d", dir, n, uid)
		}
	}
	if err := os.Lchown(dir, uid, gid); err != nil {
		return fmt.Errorf("agent: spool: %w", err)
	}
	for _, e := range ents {
		if err := os.Lchown(filepath.Join(dir, e.Name()), uid, gid); err != nil {
			return fmt.Errorf("agent: spool: %w", err)
		}
	}
	return nil
}
