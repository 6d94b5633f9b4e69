package pcapfile

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// PcapWriter writes a little-endian classic pcap stream (version 2.4), for
// fixtures and test generators. It does not buffer; an error from the
// destination is sticky. A PcapWriter is not safe for concurrent use.
type PcapWriter struct {
	w       io.Writer
	n       int64
	err     error
	nano    bool
	scratch [pcapFileHeaderLen]byte
}

// NewPcapWriter writes the file header (magic a1b2c3d4 for microsecond or
// a1b23c4d for nanosecond timestamps) and returns the writer.
func NewPcapWriter(w io.Writer, linkType uint16, snapLen uint32, nanosecond bool) (*PcapWriter, error) {
	pw := &PcapWriter{w: w, nano: nanosecond}
	h := pw.scratch[:pcapFileHeaderLen]
	magic := uint32(magicMicro)
	if nanosecond {
		magic = magicNano
	}
	binary.LittleEndian.PutUint32(h[0:], magic)
	binary.LittleEndian.PutUint16(h[4:], 2)
	binary.LittleEndian.PutUint16(h[6:], 4)
	binary.LittleEndian.PutUint32(h[8:], 0)  // thiszone
	binary.LittleEndian.PutUint32(h[12:], 0) // sigfigs
	binary.LittleEndian.PutUint32(h[16:], snapLen)
	binary.LittleEndian.PutUint32(h[20:], uint32(linkType))
	if err := pw.write(h); err != nil {
		return nil, err
	}
	return pw, nil
}

// WritePacket writes one record. ts is Unix time in nanoseconds; it must lie
// between 1970 and 2106 (ErrTimestampRange otherwise), and microsecond files
// truncate it to whole microseconds. An origLen below len(data) is written
// as len(data). data is not truncated to the snaplen and is not retained.
// WritePacket does not allocate.
func (w *PcapWriter) WritePacket(ts int64, origLen uint32, data []byte) error {
	if w.err != nil {
		return w.err
	}
	if ts < 0 || ts/1e9 > math.MaxUint32 {
		return fmt.Errorf("pcapfile: writing pcap record at %d ns: %w", ts, ErrTimestampRange)
	}
	if uint64(len(data)) > math.MaxUint32 {
		return fmt.Errorf("pcapfile: writing pcap record of %d bytes: %w", len(data), ErrTooLarge)
	}
	frac := ts % 1e9
	if !w.nano {
		frac /= 1000
	}
	caplen := uint32(len(data))
	h := w.scratch[:pcapRecordHeaderLen]
	binary.LittleEndian.PutUint32(h[0:], uint32(ts/1e9))
	binary.LittleEndian.PutUint32(h[4:], uint32(frac))
	binary.LittleEndian.PutUint32(h[8:], caplen)
	binary.LittleEndian.PutUint32(h[12:], max(origLen, caplen))
	if err := w.write(h); err != nil {
		return err
	}
	return w.write(data)
}

// Written returns the number of bytes written so far, including the file
// header.
func (w *PcapWriter) Written() int64 { return w.n }

func (w *PcapWriter) write(b []byte) error {
	n, err := w.w.Write(b)
	w.n += int64(n)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		w.err = fmt.Errorf("pcapfile: writing pcap: %w", err)
		return w.err
	}
	return nil
}
