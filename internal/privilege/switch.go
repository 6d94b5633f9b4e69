package privilege

import (
	"log/slog"
	"os"
)

// Switch switches the process to user (Drop, keeping no capability)
// and logs what it runs as; it does nothing for an empty user. The
// process must not carry on after an error: some threads may have
// switched.
func Switch(log *slog.Logger, user string) error {
	if user == "" {
		return nil
	}
	c, err := Drop(Config{User: user})
	if err != nil {
		return err
	}
	log.Info("privileges dropped", "user", user, "uid", c.UID, "gid", c.GID, "groups", c.Groups,
		"capabilities", c.Effective.String(), "bounding", c.Bounding.String())
	return nil
}

// Owner returns the user and group ids of user, for the files and
// directories a process hands to it before Switch, and whether there
// is anything to hand over: not for an empty user, nor when the
// process does not run as root (it cannot give files away, and what it
// makes is already its own).
func Owner(user string) (uid, gid int, handOver bool, err error) {
	if user == "" || os.Geteuid() != 0 {
		return 0, 0, false, nil
	}
	u, err := Lookup(user)
	if err != nil {
		return 0, 0, false, err
	}
	return u.UID, u.GID, true, nil
}
