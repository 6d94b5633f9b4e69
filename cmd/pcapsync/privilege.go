package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/pcapsync/pcapsync/internal/privilege"
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
// dir if it is missing (privilege.MakeDir), switches to the user, and
// checks that the user may write in dir (privilege.Writable).
func switchUser(log *slog.Logger, user, dir string) error {
	uid, gid, handOver, err := lookupOwner(user)
	if err != nil {
		return err
	}
	if handOver && dir != "" {
		if _, err := privilege.MakeDir(dir, uid, gid); err != nil {
			return fmt.Errorf("--user %s: --dir: %w", user, err)
		}
	}
	if err := dropPrivileges(log, user); err != nil {
		return err
	}
	if dir != "" {
		if err := privilege.Writable(dir); err != nil {
			return fmt.Errorf("--user %s: the output root %w: chown it to %s, or choose another --dir", user, err, user)
		}
	}
	return nil
}
