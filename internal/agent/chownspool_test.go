package agent

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestChownSpool: the spool and its files go to the user; a directory
// holding anything else is refused and left as it was.
func TestChownSpool(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: chown needs root")
	}
	const uid, gid = 65534, 65534
	tests := []struct {
		name    string
		files   []string
		dir     string // a subdirectory to make
		wantErr string
	}{
		{"spool", []string{"instance", "acked", "seg-00000000000000000001"}, "", ""},
		{"empty", nil, "", ""},
		{"other file", []string{"instance", "passwd"}, "", `holds "passwd", which is no spool file`},
		{"subdirectory", []string{"instance"}, "seg-x", `holds "seg-x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range tt.files {
				if err := os.WriteFile(filepath.Join(dir, f), nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if tt.dir != "" {
				if err := os.Mkdir(filepath.Join(dir, tt.dir), 0o700); err != nil {
					t.Fatal(err)
				}
			}
			err := ChownSpool(dir, uid, gid)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ChownSpool: %v, want an error saying %q", err, tt.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			wantUID := uint32(uid)
			if tt.wantErr != "" {
				wantUID = 0
			}
			for _, f := range append([]string{""}, tt.files...) {
				fi, err := os.Lstat(filepath.Join(dir, f))
				if err != nil {
					t.Fatal(err)
				}
				if got := fi.Sys().(*syscall.Stat_t).Uid; got != wantUID {
					t.Errorf("%q owned by uid %d, want %d", f, got, wantUID)
				}
			}
		})
	}
}
