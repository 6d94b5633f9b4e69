package compress

import "errors"

// Errors of Decoder.Decompress, for errors.Is.
var (
	// ErrTooLarge: a batch declares, or decompresses to, more bytes than
	// the limit (a decompression bomb, or a limit set too low).
	ErrTooLarge = errors.New("decompressed size over limit")
	// ErrCorrupt: the compressed bytes do not decode to exactly the
	// declared length.
	ErrCorrupt = errors.New("corrupt compressed data")
)
