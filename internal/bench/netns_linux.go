package bench

import (
	"errors"
	"fmt"
	"os"
	"os/exec"

	"github.com/pcapsync/pcapsync/internal/testutil/netns"
)

// vethPair is two network namespaces, A and B, joined by a veth pair
// (internal/testutil/netns, the tests' own): vA 198.18.0.1/30 in A, vB
// 198.18.0.2/30 in B, static neighbours, IPv6 off, loopback up in both
// (for a collector in A).
type vethPair = netns.Pair

// Interface names and addresses of a vethPair.
const vethA, vethB = "vA", "vB"

var addrA = netns.AddrA.String()

// newVethPair creates the namespaces, named after prefix and this
// process's id. On error it has already deleted what it created;
// otherwise the caller must call Delete.
func newVethPair(prefix string) (*vethPair, error) {
	return netns.Create(netns.Config{Prefix: prefix, IfA: vethA, IfB: vethB, MACA: "02:70:63:62:00:01", MACB: "02:70:63:62:00:02"})
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
		ns.Delete()
		return nil, "", nil, err
	}
	return ns, dir, func() { os.RemoveAll(dir); ns.Delete() }, nil
}
