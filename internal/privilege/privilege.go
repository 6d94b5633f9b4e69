package privilege

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
)

// Cap is a Linux capability, by its number (linux/capability.h).
type Cap uint

// The capabilities pcapsync may need.
const (
	NetBindService Cap = 10 // CAP_NET_BIND_SERVICE: bind ports below 1024
	NetAdmin       Cap = 12 // CAP_NET_ADMIN: SO_RCVBUFFORCE, SO_SNDBUFFORCE
	NetRaw         Cap = 13 // CAP_NET_RAW: AF_PACKET sockets
)

var capNames = map[Cap]string{NetBindService: "CAP_NET_BIND_SERVICE", NetAdmin: "CAP_NET_ADMIN", NetRaw: "CAP_NET_RAW"}

func (c Cap) String() string {
	if n, ok := capNames[c]; ok {
		return n
	}
	return "CAP_" + strconv.Itoa(int(c))
}

// Set is a set of capabilities, bit n for capability n, as /proc shows
// them.
type Set uint64

// SetOf returns the set of caps.
func SetOf(caps ...Cap) Set {
	var s Set
	for _, c := range caps {
		s |= 1 << c
	}
	return s
}

// Has reports whether c is in s.
func (s Set) Has(c Cap) bool { return s&(1<<c) != 0 }

// String lists the capabilities of s, comma-separated ("none" when
// empty; "all" for a full set).
func (s Set) String() string {
	if s == 0 {
		return "none"
	}
	if bits.OnesCount64(uint64(s)) >= 38 {
		return "all"
	}
	var names []string
	for c := Cap(0); c < 64; c++ {
		if s.Has(c) {
			names = append(names, c.String())
		}
	}
	return strings.Join(names, ",")
}

// Config says whom Drop switches to and what it keeps.
type Config struct {
	// User is the user to switch to: a name from the user database, or
	// a numeric user id. Required. The group is the user's primary
	// group, the supplementary groups the user's groups in the group
	// database.
	User string

	// Keep are the capabilities kept, in the permitted and effective
	// sets and in the bounding set, after the switch; empty keeps none.
	// Every capability is dropped from the inheritable and ambient sets.
	Keep []Cap
}

// Creds are the credentials of one thread, as /proc/PID/task/TID/status
// shows them.
type Creds struct {
	UID, GID   int // real user and group id
	EUID, EGID int // effective user and group id
	Groups     []int
	// The capability sets.
	Effective, Permitted, Inheritable, Bounding, Ambient Set
	NoNewPrivs                                           bool
}

// String renders c as one line, for logs and test failures.
func (c Creds) String() string {
	return fmt.Sprintf("uid %d euid %d gid %d egid %d groups %v effective %v permitted %v inheritable %v bounding %v ambient %v no_new_privs %v",
		c.UID, c.EUID, c.GID, c.EGID, c.Groups, c.Effective, c.Permitted, c.Inheritable, c.Bounding, c.Ambient, c.NoNewPrivs)
}

// Read returns the credentials of every thread of process pid (0: this
// process), from /proc/PID/task/*/status.
func Read(pid int) ([]Creds, error) {
	p := "self"
	if pid != 0 {
		p = strconv.Itoa(pid)
	}
	tasks, err := filepath.Glob(filepath.Join("/proc", p, "task", "*", "status"))
	if err != nil {
		return nil, err
	}
	if len(tasks) == 0 {
		return nil, fmt.Errorf("reading credentials: no threads under /proc/%s/task", p)
	}
	var out []Creds
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			if os.IsNotExist(err) {
				continue // the thread exited
			}
			return nil, fmt.Errorf("reading credentials: %w", err)
		}
		c, err := parseStatus(b)
		if err != nil {
			return nil, fmt.Errorf("reading credentials from %s: %w", t, err)
		}
		out = append(out, c)
	}
	return out, nil
}

// parseStatus reads the credential lines of a /proc status file.
func parseStatus(b []byte) (Creds, error) {
	var c Creds
	sets := map[string]*Set{"CapInh": &c.Inheritable, "CapPrm": &c.Permitted, "CapEff": &c.Effective,
		"CapBnd": &c.Bounding, "CapAmb": &c.Ambient}
	seen := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(val)
		var err error
		switch key {
		case "Uid", "Gid":
			if len(f) < 2 {
				return c, fmt.Errorf("%s: %q: want real and effective ids", key, val)
			}
			var r, e int
			if r, err = strconv.Atoi(f[0]); err == nil {
				e, err = strconv.Atoi(f[1])
			}
			if key == "Uid" {
				c.UID, c.EUID = r, e
			} else {
				c.GID, c.EGID = r, e
			}
		case "Groups":
			c.Groups = make([]int, 0, len(f))
			for _, g := range f {
				n, gerr := strconv.Atoi(g)
				if gerr != nil {
					err = gerr
					break
				}
				c.Groups = append(c.Groups, n)
			}
		case "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb":
			if len(f) != 1 {
				return c, fmt.Errorf("%s: %q: want one hex number", key, val)
			}
			var v uint64
			v, err = strconv.ParseUint(f[0], 16, 64)
			*sets[key] = Set(v)
		case "NoNewPrivs":
			c.NoNewPrivs = strings.TrimSpace(val) == "1"
		default:
			continue
		}
		if err != nil {
			return c, fmt.Errorf("%s: %w", key, err)
		}
		seen++
	}
	if seen < 8 {
		return c, fmt.Errorf("credential lines missing (found %d of 8)", seen)
	}
	return c, nil
}

// check reports how c differs from the state Drop promises for a user
// with ids uid and gid, groups groups, keeping keep; "" when it does not.
func check(c Creds, uid, gid int, groups []int, keep Set) string {
	var bad []string
	if c.UID != uid || c.EUID != uid {
		bad = append(bad, fmt.Sprintf("uid %d euid %d, want %d", c.UID, c.EUID, uid))
	}
	if c.GID != gid || c.EGID != gid {
		bad = append(bad, fmt.Sprintf("gid %d egid %d, want %d", c.GID, c.EGID, gid))
	}
	if !sameSet(c.Groups, groups) {
		bad = append(bad, fmt.Sprintf("groups %v, want %v", c.Groups, groups))
	}
	for _, s := range []struct {
		name      string
		got, want Set
	}{{"effective", c.Effective, keep}, {"permitted", c.Permitted, keep}, {"inheritable", c.Inheritable, 0},
		{"ambient", c.Ambient, 0}, {"bounding", c.Bounding, keep}} {
		if s.got != s.want {
			bad = append(bad, fmt.Sprintf("%s capabilities %v, want %v", s.name, s.got, s.want))
		}
	}
	if !c.NoNewPrivs {
		bad = append(bad, "no_new_privs not set")
	}
	return strings.Join(bad, "; ")
}

func sameSet(a, b []int) bool {
	m := map[int]bool{}
	for _, x := range a {
		m[x] = true
	}
	n := map[int]bool{}
	for _, x := range b {
		if !m[x] {
			return false
		}
		n[x] = true
	}
	return len(m) == len(n)
}

// User is an entry of the user database.
type User struct {
	Name     string
	UID, GID int   // user id, primary group id
	Groups   []int // every group of the user, the primary one included
}

// Lookup returns the user name (a user name, or a numeric user id) in
// the user database, with its groups; an error matching ErrNoUser when
// there is none.
func Lookup(name string) (User, error) {
	if name == "" {
		return User{}, fmt.Errorf("%w: empty user name", ErrNoUser)
	}
	u, err := user.Lookup(name)
	if err != nil {
		var unknown user.UnknownUserError
		if !errors.As(err, &unknown) {
			return User{}, fmt.Errorf("looking up user %q: %w", name, err)
		}
		if _, nerr := strconv.Atoi(name); nerr != nil {
			return User{}, fmt.Errorf("%w: %q", ErrNoUser, name)
		}
		if u, err = user.LookupId(name); err != nil {
			return User{}, fmt.Errorf("%w: user id %s: %w", ErrNoUser, name, err)
		}
	}
	out := User{Name: u.Username}
	if out.UID, err = strconv.Atoi(u.Uid); err == nil {
		out.GID, err = strconv.Atoi(u.Gid)
	}
	if err != nil {
		return User{}, fmt.Errorf("user %q: %w", name, err)
	}
	ids, err := u.GroupIds()
	if err != nil {
		return User{}, fmt.Errorf("reading the groups of user %q: %w", name, err)
	}
	for _, s := range ids {
		g, err := strconv.Atoi(s)
		if err != nil {
			return User{}, fmt.Errorf("user %q: group %q: %w", name, s, err)
		}
		out.Groups = append(out.Groups, g)
	}
	return out, nil
}
