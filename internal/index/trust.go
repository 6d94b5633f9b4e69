package index

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// trusted reports (ErrUntrusted) whether the index file described by
// ix may be believed for the data file described by data: its owner is
// root, the reader's effective user or the data file's owner, and no
// one else may write it (no group or other write bit). A user who can
// write the output root but is none of these can plant an index; they
// cannot make one that this accepts. One who owns the data file could
// change its packets as well as its index.
func trusted(ix, data fs.FileInfo) error {
	if m := ix.Mode().Perm(); m&0o022 != 0 {
		return fmt.Errorf("mode %v, writable by others than its owner: %w", m, ErrUntrusted)
	}
	is, ok := ix.Sys().(*syscall.Stat_t)
	ds, dok := data.Sys().(*syscall.Stat_t)
	if !ok || !dok {
		return nil
	}
	if is.Uid == 0 || int(is.Uid) == os.Geteuid() || is.Uid == ds.Uid {
		return nil
	}
	return fmt.Errorf("owned by uid %d, its data file by uid %d: %w", is.Uid, ds.Uid, ErrUntrusted)
}
