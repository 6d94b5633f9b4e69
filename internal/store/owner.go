package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pcapsync/pcapsync/internal/safefs"
)

// OwnerFile, below Dir, makes one owner of an output root at a time: a
// Store holds a flock(2) on it from Open to Close (the kernel drops it
// when the process dies, however it dies), and the file says who holds
// it (Owner, as JSON).
//
// An exclusive Store (Config.Shared false) takes the lock exclusive: a
// second Store on the root, exclusive or Shared, is refused at Open
// with ErrRootBusy, before it reads the state or repairs a file. The
// Stores of a writer group (Config.Shared, Config.Group) share it: the
// first member takes it exclusive, writes its Owner and turns it into
// a shared lock; a later member takes it shared and is admitted when
// the Owner names its group, refused (ErrRootBusy) when it names
// another. So the Owner always describes a live member while a group
// holds the root: it is written only by a Store that held the lock
// alone. Taking the lock is retried for up to ownerWait, the time a
// member holds it exclusive while it writes.
const OwnerFile = ".pcapsync-owner"

// MaxGroupLen bounds Config.Group.
const MaxGroupLen = 255

// ownerWait is how long Open tries to take the owner's lock.
const ownerWait = time.Second

// maxOwnerFile bounds what is read of the owner file.
const maxOwnerFile = 4096

// Owner is what OwnerFile says of the Store holding the root.
type Owner struct {
	PID   int       `json:"pid"`
	Host  string    `json:"host"`
	Role  string    `json:"role"` // "exclusive" or "group"
	Group string    `json:"group,omitempty"`
	Since time.Time `json:"since"`
}

func (o Owner) String() string {
	who := fmt.Sprintf("pid %d on host %q since %s", o.PID, o.Host, o.Since.UTC().Format(time.RFC3339))
	if o.Role == "group" {
		return fmt.Sprintf("writer group %q (member %s)", o.Group, who)
	}
	return "an exclusive writer (" + who + ")"
}

// lockRoot takes the owner's lock of dir for a Store of cfg and returns
// the file holding it; closing it gives the root back.
func lockRoot(dir string, shared bool, group string) (*os.File, error) {
	path := filepath.Join(dir, OwnerFile)
	f, err := safefs.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("store: output directory %s: opening the owner's lock: %w", dir, err)
	}
	host, _ := os.Hostname()
	me := Owner{PID: os.Getpid(), Host: host, Role: "exclusive", Since: time.Now().UTC()}
	if shared {
		me.Role, me.Group = "group", group
	}
	deadline := time.Now().Add(ownerWait)
	for {
		ok, err := tryOwn(f, me)
		if ok || err != nil {
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("store: output directory %s: %w", dir, err)
			}
			return f, nil
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("store: output directory %s is held by %s: %w", dir, describeOwner(path), ErrRootBusy)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tryOwn tries once to take f's lock for me; false without an error:
// held by another owner now.
func tryOwn(f *os.File, me Owner) (bool, error) {
	busy, err := flockHow(f, unix.LOCK_EX)
	if err != nil || busy && me.Role != "group" {
		return false, err
	}
	if !busy {
		if err := writeOwner(f, me); err != nil {
			return false, err
		}
		if me.Role != "group" {
			return true, nil
		}
		// Another Store may take it between the two: flock's
		// conversion is not atomic; the Owner is checked below.
		if busy, err = flockHow(f, unix.LOCK_SH); busy || err != nil {
			return false, err
		}
	} else if busy, err = flockHow(f, unix.LOCK_SH); busy || err != nil {
		return false, err // an exclusive holder, or a member writing
	}
	o, err := readOwner(f.Name())
	if err == nil && o.Role == "group" && o.Group == me.Group {
		return true, nil
	}
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return false, nil
}

// flockHow takes flock how (LOCK_EX or LOCK_SH) on f without waiting;
// busy: another open file description holds a lock that conflicts.
func flockHow(f *os.File, how int) (busy bool, err error) {
	for {
		err = unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if errors.Is(err, unix.EWOULDBLOCK) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("locking %s: %w", f.Name(), err)
	}
	return false, nil
}

func writeOwner(f *os.File, o Owner) error {
	b, err := json.Marshal(o)
	if err != nil {
		return err
	}
	if err := f.Truncate(0); err != nil {
		return fmt.Errorf("writing %s: %w", f.Name(), err)
	}
	if _, err := f.WriteAt(append(b, '\n'), 0); err != nil {
		return fmt.Errorf("writing %s: %w", f.Name(), err)
	}
	return nil
}

// readOwner reads the owner file at path.
func readOwner(path string) (Owner, error) {
	var o Owner
	b, err := safefs.ReadFile(path, maxOwnerFile)
	if err == nil {
		err = json.Unmarshal(b, &o)
	}
	return o, err
}

// describeOwner says who holds the root, as its owner file says.
func describeOwner(path string) string {
	o, err := readOwner(path)
	if err != nil {
		return "another process (" + path + " unreadable: " + err.Error() + ")"
	}
	return o.String()
}
