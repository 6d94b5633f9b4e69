package main

import (
	"fmt"
	"log/slog"

	"github.com/pcapsync/pcapsync/internal/privilege"
)

// userFlagUsage is the help of --user (-Z): the agent's and collector's.
const userFlagUsage = "when started as root: once its sockets (and %s) are open, switch to this user (name or uid), its group and groups, giving up every capability, as tcpdump -Z (docs/privileges.md)"

// switchUser is the collector's and the writer's --user, once their
// files are read and their listeners bound: it makes the output root
// dir if it is missing (privilege.MakeDir), switches to the user, and
// checks that the user may write in dir (privilege.Writable).
func switchUser(log *slog.Logger, user, dir string) error {
	uid, gid, handOver, err := privilege.Owner(user)
	if err != nil {
		return fmt.Errorf("--user %s: %w", user, err)
	}
	if handOver && dir != "" {
		if _, err := privilege.MakeDir(dir, uid, gid); err != nil {
			return fmt.Errorf("--user %s: --dir: %w", user, err)
		}
	}
	if err := privilege.Switch(log, user); err != nil {
		return fmt.Errorf("--user %s: %w", user, err)
	}
	if dir != "" {
		if err := privilege.Writable(dir); err != nil {
			return fmt.Errorf("--user %s: the output root %w: chown it to %s, or choose another --dir", user, err, user)
		}
	}
	return nil
}
