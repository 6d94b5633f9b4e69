package main

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/pcapsync/pcapsync/internal/privilege"
	"golang.org/x/sys/unix"
)

// userFlagUsage is the help of --user (-Z): the agent's and collector's.
const userFlagUsage = "when started as root: once its sockets (and %s) are open, switch to this user (name or uid), its group and groups, giving up every capability, as tcpdump -Z (docs/privileges.md)"

// dropPrivileges switches the process to user, keeping no capability,
// and logs what it runs as. Nothing is done for an empty user. The
// process must not carry on after an error.
func dropPrivileges(log *slog.Logger, user string) error {
	if user == "" {
		return nil
	}
	c, err := privilege.Drop(privilege.Config{User: user})
	if err != nil {
		return fmt.Errorf("--user %s: %w", user, err)
	}
	log.Info("privileges dropped", "user", user, "uid", c.UID, "gid", c.GID, "groups", c.Groups,
		"capabilities", c.Effective.String(), "bounding", c.Bounding.String())
	return nil
}

// lookupOwner returns the user and group ids --user names, for the
// files and directories handed to it before the switch, and whether
// there is anything to hand over (the process runs as root).
func lookupOwner(user string) (uid, gid int, handOver bool, err error) {
	if user == "" || os.Geteuid() != 0 {
		return 0, 0, false, nil
	}
	u, err := privilege.Lookup(user)
	if err != nil {
		return 0, 0, false, fmt.Errorf("--user %s: %w", user, err)
	}
	return u.UID, u.GID, true, nil
}

// switchUser is the collector's and the writer's --user, once their
// files are read and their listeners bound: it makes the output root
// dir if it is missing (its parents owned by root, mode 0755; dir
// itself 0750 for the user),
// switches to the user, and checks that the user may write in dir. An
// existing dir is not handed over: the user must own it, or be allowed
// to write in it, already.
func switchUser(log *slog.Logger, user, dir string) error {
	uid, gid, handOver, err := lookupOwner(user)
	if err != nil {
		return err
	}
	if handOver && dir != "" {
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			// Parents as root, open to traverse; dir the user's alone.
			err := os.MkdirAll(filepath.Dir(dir), 0o755)
			if err == nil {
				err = os.Mkdir(dir, 0o750)
			}
			if err != nil {
				return fmt.Errorf("--user %s: making --dir: %w", user, err)
			}
			if err := os.Chown(dir, uid, gid); err != nil {
				return fmt.Errorf("--user %s: handing --dir over: %w", user, err)
			}
		}
	}
	if err := dropPrivileges(log, user); err != nil {
		return err
	}
	if dir != "" {
		if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
			return fmt.Errorf("--user %s: the output root %s is not writable by the user (%w): chown it to %s, or choose another --dir", user, dir, err, user)
		}
	}
	return nil
}
