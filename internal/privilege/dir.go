package privilege

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// MakeDir makes dir for the user uid (primary group gid) to write in
// after Drop, when it is missing: its missing parents as the running
// user (root, before Drop), mode 0755 so that anyone may traverse them,
// and dir itself mode 0750, owned by uid and gid. An existing dir is
// left as it is, owner and mode included (it may hold data that must
// not be handed to the user): the user must be allowed to write in it
// already, which Writable checks after Drop. Both modes are less the
// umask. It reports whether it made dir.
func MakeDir(dir string, uid, gid int) (made bool, err error) {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return false, fmt.Errorf("making the parents of %s: %w", dir, err)
	}
	if err := os.Mkdir(dir, 0o750); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return false, nil
		}
		return false, fmt.Errorf("making %s: %w", dir, err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		return true, fmt.Errorf("handing %s over: %w", dir, err)
	}
	return true, nil
}

// Writable reports whether the process, as the user it runs as now,
// may make files in dir (write and search permission): nil, or an error
// "DIR is not writable by the user (REASON)" wrapping ErrNotWritable and
// the system's error.
func Writable(dir string) error {
	if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
		return fmt.Errorf("%s is %w (%w)", dir, ErrNotWritable, err)
	}
	return nil
}
