package index

import "errors"

// ErrDamaged: an index file is not one this package wrote, or was
// changed since (a checksum, a length or a field does not verify). It
// must be ignored: the data file is read without it.
var ErrDamaged = errors.New("index damaged")

// ErrVersion: an index file has a version this package does not read.
var ErrVersion = errors.New("unknown index version")

// ErrMismatch: an index file is sound but describes another data file
// (its name or size differ), or a data file that changed since.
var ErrMismatch = errors.New("index does not match its data file")

// ErrUnfinished: an index of a closed data file lacks its end record
// (the writer stopped before it closed the file).
var ErrUnfinished = errors.New("index unfinished")

// ErrUntrusted: an index file was not written by a user the reader
// trusts (its owner is neither root, nor the reader's effective user,
// nor the owner of its data file), or others than its owner may write
// it. It is ignored like a damaged one: the data file is scanned.
var ErrUntrusted = errors.New("index not written by a trusted user")
