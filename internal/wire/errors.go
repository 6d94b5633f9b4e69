package wire

import "errors"

// Sentinel errors. Decoders wrap them with context ("batch seq 7: record
// 12: %w"), so test with errors.Is.
var (
	// ErrBadMagic: the first byte of a frame header is not Magic; the peer
	// does not speak this protocol (or the stream lost its framing).
	ErrBadMagic = errors.New("bad magic byte")
	// ErrVersion: the frame's protocol version is not one we speak.
	ErrVersion = errors.New("unsupported protocol version")
	// ErrUnknownType: the frame type is not defined, or not expected here.
	ErrUnknownType = errors.New("unknown frame type")
	// ErrFlags: reserved flag bits are set, or the codec is unknown.
	ErrFlags = errors.New("bad frame flags")
	// ErrTooLarge: a length field exceeds the receiver's limit. Nothing was
	// allocated for it.
	ErrTooLarge = errors.New("length exceeds limit")
	// ErrTruncated: a payload ends before the structure it claims to hold.
	ErrTruncated = errors.New("truncated")
	// ErrChecksum: a batch's CRC32C does not match its bytes.
	ErrChecksum = errors.New("checksum mismatch")
	// ErrUnchecked: a batch without a checksum (FlagUnchecked) where the
	// receiver requires one (plain transports: UDP, stored entries).
	ErrUnchecked = errors.New("batch without checksum not accepted here (send it with a checksum: agent --checksum always)")
	// ErrMalformed: a field holds an impossible value (trailing bytes,
	// counts that disagree, an interface index out of range, ...).
	ErrMalformed = errors.New("malformed")
	// ErrClosed: the FrameReader was closed.
	ErrClosed = errors.New("frame reader closed")
	// ErrBadName: an agent name is not usable as an identity and a
	// directory name (see ValidateName).
	ErrBadName = errors.New("bad agent name")
)
