//go:build linux

package capture

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// capsHelperEnv makes the test binary run capsHelper instead of the
// tests: it is started as an unprivileged user with a chosen set of
// capabilities, which a test process cannot give up and get back.
const capsHelperEnv = "CAPTURE_TEST_CAPS_HELPER"

func TestMain(m *testing.M) {
	if iface := os.Getenv(capsHelperEnv); iface != "" {
		os.Exit(capsHelper(iface))
	}
	if os.Getenv(compileHelperEnv) != "" {
		os.Exit(compileHelper())
	}
	os.Exit(m.Run())
}

// capsHelper opens a capture on iface, in promiscuous mode and with a
// 64 MiB ring (far past the default RLIMIT_MEMLOCK), and reports on
// stdout "ok promisc" (the interface's IFF_PROMISC flag is set) or the
// error and whether it matches ErrPermission.
func capsHelper(iface string) int {
	h, err := Open(Config{Interface: iface, RingSize: 64 << 20})
	if err != nil {
		fmt.Printf("error %v: ErrPermission %v\n", err, errors.Is(err, ErrPermission))
		return 0
	}
	defer h.Close()
	// SIOCGIFFLAGS shows only the promiscuity asked for with ioctls;
	// the device's flags in sysfs (mounted for this namespace by ip
	// netns exec) show the packet socket's too.
	b, err := os.ReadFile("/sys/class/net/" + iface + "/flags")
	if err != nil {
		fmt.Println("error", err)
		return 0
	}
	flags, err := strconv.ParseUint(strings.TrimSpace(string(b)), 0, 32)
	if err != nil {
		fmt.Println("error", err)
		return 0
	}
	if flags&unix.IFF_PROMISC != 0 {
		fmt.Println("ok promisc")
	} else {
		fmt.Println("ok not promisc")
	}
	return 0
}

// TestCapabilities opens a capture as the user nobody holding exactly
// the capabilities of each case (setpriv(1)), and checks what the
// package documents: CAP_NET_RAW alone suffices, promiscuous mode and a
// large ring included, and without it Open says what is missing.
func TestCapabilities(t *testing.T) {
	tn := newTestNet(t, 0)
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("skipping: needs setpriv(1) from util-linux")
	}
	// The test binary, where nobody may run it.
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "capture.test")
	copyFile(t, os.Args[0], bin, 0o755)
	tests := []struct {
		name string
		caps string // for setpriv's --inh-caps and --ambient-caps
		want string // what the helper prints, a prefix
	}{
		{"none", "", "error capturing on \"" + capIf + "\" needs CAP_NET_RAW (operation not permitted): run as root, or grant it: setcap cap_net_raw+ep "},
		{"net_admin only", "+net_admin", "error capturing on \"" + capIf + "\" needs CAP_NET_RAW"},
		{"net_raw", "+net_raw", "ok promisc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := []string{"netns", "exec", tn.capNS, "setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"}
			if tt.caps != "" {
				args = append(args, "--inh-caps="+tt.caps, "--ambient-caps="+tt.caps)
			} else {
				args = append(args, "--inh-caps=-all")
			}
			args = append(args, bin)
			cmd := exec.Command("ip", args...)
			cmd.Env = append(os.Environ(), capsHelperEnv+"="+capIf)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("helper: %v: %s", err, out)
			}
			got := strings.TrimSpace(string(out))
			if !strings.HasPrefix(got, tt.want) {
				t.Errorf("helper printed %q\nwant it to start %q", got, tt.want)
			}
			if strings.HasPrefix(tt.want, "error") && !strings.HasSuffix(got, "ErrPermission true") {
				t.Errorf("helper printed %q: the error does not match ErrPermission", got)
			}
		})
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
