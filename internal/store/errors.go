package store

import "errors"

// ErrBusy: an agent's files left unfinished by a previous run are being
// repaired (Store.Writer). Its high-water marks are not known until the
// repair is done; ask again later.
var ErrBusy = errors.New("files being repaired")

// ErrCutBack: Commit found that the open file was cut back to its last
// commit (a rotation or close failed) after batches were written: they
// are in no file, and the marks stay where they were.
var ErrCutBack = errors.New("file was cut back after a write error")
