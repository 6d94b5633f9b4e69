package pcapfile

import (
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Sentinel errors. Reader errors caused by bad input are *FormatError values
// whose Err is (or wraps) one of the first four; test them with errors.Is.
var (
	// ErrUnknownFormat means the input starts with neither a pcap nor a
	// pcapng magic number (or its pcapng byte-order magic is wrong).
	ErrUnknownFormat = errors.New("unknown file format")

	// ErrTruncated means the input ends inside a file header, record or
	// block. Its message is "unexpected EOF" and it wraps
	// io.ErrUnexpectedEOF, so errors.Is(err, io.ErrUnexpectedEOF) also
	// holds.
	ErrTruncated = fmt.Errorf("%w", io.ErrUnexpectedEOF)

	// ErrTooLarge means a length field exceeds a limit: a captured length
	// above ReaderConfig.MaxPacket, a parsed pcapng block above
	// MaxPacket+BlockSlack, or (writers) a value too long for its field.
	ErrTooLarge = errors.New("length exceeds limit")

	// ErrMalformed means the input is bad in any other way: inconsistent
	// lengths, unknown interface ids, unsupported versions, bad options.
	ErrMalformed = errors.New("malformed input")

	// ErrUnknownInterface is returned by NgWriter when an interface index
	// does not refer to an interface added with AddInterface.
	ErrUnknownInterface = errors.New("unknown interface index")

	// ErrTimestampRange is returned by PcapWriter for timestamps that the
	// classic format cannot hold (before 1970 or after 2106).
	ErrTimestampRange = errors.New("timestamp out of range")
)

// FormatError reports malformed input. Offset is the byte offset in the
// file where the offending file header, record or block starts.
type FormatError struct {
	Offset int64
	Msg    string // what was wrong, e.g. "truncated packet record"
	Err    error  // ErrUnknownFormat, ErrTruncated, ErrTooLarge or ErrMalformed
}

// Error returns e.g. "offset 1234: truncated packet record: unexpected EOF".
func (e *FormatError) Error() string {
	s := "offset " + strconv.FormatInt(e.Offset, 10) + ": " + e.Msg
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns e.Err.
func (e *FormatError) Unwrap() error { return e.Err }

func formatErr(off int64, err error, format string, args ...any) *FormatError {
	return &FormatError{Offset: off, Msg: fmt.Sprintf(format, args...), Err: err}
}
