package bench

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
)

// vethPair is two network namespaces, A and B, joined by a veth pair:
// vA (198.18.0.1/30) in A, vB (198.18.0.2/30) in B, both up, and A's
// loopback up (for a collector there).
type vethPair struct {
	A, B string
}

// Interface names and addresses of a vethPair.
const (
	vethA, vethB = "vA", "vB"
	addrA, addrB = "198.18.0.1", "198.18.0.2"
)

// newVethPair creates the namespaces, named after prefix and this
// process's id. On error it has already deleted what it created;
// otherwise the caller must call del.
func newVethPair(prefix string) (*vethPair, error) {
	tag := strconv.Itoa(os.Getpid())
	p := &vethPair{A: prefix + "-" + tag + "-a", B: prefix + "-" + tag + "-b"}
	for _, args := range [][]string{
		{"netns", "add", p.A}, {"netns", "add", p.B},
		{"link", "add", vethA, "netns", p.A, "type", "veth", "peer", "name", vethB, "netns", p.B},
		{"-n", p.A, "addr", "add", addrA + "/30", "dev", vethA},
		{"-n", p.B, "addr", "add", addrB + "/30", "dev", vethB},
		{"-n", p.A, "link", "set", vethA, "up"}, {"-n", p.B, "link", "set", vethB, "up"},
		{"-n", p.A, "link", "set", "lo", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			p.del()
			return nil, fmt.Errorf("ip %v: %w: %s", args, err, out)
		}
	}
	return p, nil
}

// del deletes both namespaces (and with them the veth pair).
func (p *vethPair) del() {
	exec.Command("ip", "netns", "del", p.A).Run()
	exec.Command("ip", "netns", "del", p.B).Run()
}

// vethBench checks what a bench in namespaces needs (root, ip, tcpdump,
// the pcapsync binary exe), then creates a vethPair named after prefix
// and a work directory. done deletes both; on error nothing is left.
// name prefixes the errors ("bench live").
func vethBench(name, prefix, exe string) (ns *vethPair, dir string, done func(), err error) {
	if os.Geteuid() != 0 {
		return nil, "", nil, fmt.Errorf("%s: %w (network namespaces, packet capture)", name, ErrNeedsRoot)
	}
	for _, tool := range []string{"ip", "tcpdump"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, "", nil, fmt.Errorf("%s: %s not installed (scripts/deps.sh installs it)", name, tool)
		}
	}
	if exe == "" {
		return nil, "", nil, errors.New(name + ": the pcapsync binary (Exe) is required")
	}
	if ns, err = newVethPair(prefix); err != nil {
		return nil, "", nil, fmt.Errorf("%s: %w", name, err)
	}
	if dir, err = os.MkdirTemp("", prefix); err != nil {
		ns.del()
		return nil, "", nil, err
	}
	return ns, dir, func() { os.RemoveAll(dir); ns.del() }, nil
}
