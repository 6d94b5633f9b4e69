//go:build linux

package privilege

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
	"kernel.org/pub/linux/libs/security/libcap/cap"
)

// Drop switches every thread of the process to cfg.User, its primary
// group and its supplementary groups, keeping only the capabilities in
// cfg.Keep (in the permitted, effective and bounding sets; none in the
// inheritable and ambient ones), and sets no_new_privs, so that no
// program it might execute gains privileges either. It then checks
// every thread and returns the main thread's credentials.
//
// The process must run as root (effective user id 0); one that already
// runs as cfg.User has nothing to give up and Drop only reports its
// credentials (an unprivileged user cannot drop a capability granted
// through the ambient set to its own process: that one is kept).
// Otherwise Drop returns an error matching ErrNotRoot.
//
// A failure part way leaves the process with some of its privileges; an
// error matching ErrNotDropped means every step succeeded but a thread
// shows otherwise. Either way the caller should exit.
func Drop(cfg Config) (Creds, error) {
	u, err := Lookup(cfg.User)
	if err != nil {
		return Creds{}, err
	}
	uid, gid, groups := u.UID, u.GID, u.Groups
	if os.Geteuid() != 0 {
		if os.Getuid() == uid && os.Geteuid() == uid {
			cs, err := Read(0)
			if err != nil {
				return Creds{}, err
			}
			return cs[0], nil
		}
		return Creds{}, fmt.Errorf("%w: running as uid %d, not root", ErrNotRoot, os.Geteuid())
	}
	keep := SetOf(cfg.Keep...)
	if err := cap.SetGroups(gid, groups...); err != nil {
		return Creds{}, fmt.Errorf("setting groups: %w", err)
	}
	// Dropping from the bounding set needs CAP_SETPCAP in effect, which
	// SetGroups lowered again; root still has it in its permitted set.
	w := cap.GetProc()
	if err := w.SetFlag(cap.Effective, true, cap.SETPCAP); err != nil {
		return Creds{}, fmt.Errorf("raising CAP_SETPCAP: %w", err)
	}
	if err := w.SetProc(); err != nil {
		return Creds{}, fmt.Errorf("raising CAP_SETPCAP: %w", err)
	}
	for v := cap.Value(0); v < cap.MaxBits(); v++ {
		if keep.Has(Cap(v)) {
			continue
		}
		if err := cap.DropBound(v); err != nil {
			return Creds{}, fmt.Errorf("dropping %s from the bounding set: %w", Cap(v), err)
		}
	}
	// SetUID keeps the permitted set across the change of user id (a
	// plain setuid from root would clear it), so that the kept
	// capabilities can be raised again below; it clears the ambient set.
	if err := cap.SetUID(uid); err != nil {
		return Creds{}, fmt.Errorf("setting user id: %w", err)
	}
	final := cap.NewSet()
	vals := make([]cap.Value, 0, len(cfg.Keep))
	for _, c := range cfg.Keep {
		vals = append(vals, cap.Value(c))
	}
	if len(vals) > 0 {
		if err := final.SetFlag(cap.Permitted, true, vals...); err != nil {
			return Creds{}, fmt.Errorf("keeping %v: %w", keep, err)
		}
		if err := final.SetFlag(cap.Effective, true, vals...); err != nil {
			return Creds{}, fmt.Errorf("keeping %v: %w", keep, err)
		}
	}
	if err := final.SetProc(); err != nil {
		return Creds{}, fmt.Errorf("setting capabilities to %v: %w", keep, err)
	}
	if _, err := cap.Prctlw(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return Creds{}, fmt.Errorf("setting no_new_privs: %w", err)
	}
	cs, err := Read(0)
	if err != nil {
		return Creds{}, err
	}
	for _, c := range cs {
		if bad := check(c, uid, gid, groups, keep); bad != "" {
			return Creds{}, fmt.Errorf("%w: a thread shows %s", ErrNotDropped, bad)
		}
	}
	return cs[0], nil
}
