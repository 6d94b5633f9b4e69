package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// TestGolden rewrites every testdata/NAME.input.go and compares with
// NAME.inject.golden and NAME.remove.golden; go test -update writes them.
// It also checks that injecting twice changes nothing and that removing
// after injecting is removing alone.
func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/*.input.go")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no testdata/*.input.go: %v", err)
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".input.go")
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			injected := mustRewrite(t, in, src, false)
			removed := mustRewrite(t, in, src, true)
			golden(t, "testdata/"+name+".inject.golden", injected)
			golden(t, "testdata/"+name+".remove.golden", removed)
			if again := mustRewrite(t, in, injected, false); string(again) != string(injected) {
				t.Errorf("injecting twice changes the file again:\n%s", again)
			}
			if back := mustRewrite(t, in, injected, true); string(back) != string(removed) {
				t.Errorf("remove after inject:\n%s\nwant remove alone:\n%s", back, removed)
			}
		})
	}
}

func mustRewrite(t *testing.T, name string, src []byte, remove bool) []byte {
	t.Helper()
	out, changed, err := rewrite(name, src, remove)
	if err != nil {
		t.Fatalf("rewrite(remove=%v): %v", remove, err)
	}
	if changed != (string(out) != string(src)) {
		t.Errorf("rewrite(remove=%v) says changed=%v", remove, changed)
	}
	return out
}

func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs:\n%s\nwant:\n%s", path, got, want)
	}
}

// TestUnformatted covers layouts gofmt does not write, so that testdata
// (which CI's gofmt check reads) cannot hold them.
func TestUnformatted(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{
			name: "statement on the brace's line",
			in:   "package p\n\nfunc f() { println(1)\n\tprintln(2)\n}\n",
			want: "package p\n\nimport \"github.com/pcapsync/pcapsync/internal/functrace\"\n\nfunc f() {\n\tdefer functrace.Trace()()\n\tprintln(1)\n\tprintln(2)\n}\n",
		},
		{
			name: "one-line import block",
			in:   "package p\n\nimport (\"fmt\")\n\nfunc f() {\n\tfmt.Println()\n}\n",
			want: "package p\n\nimport (\n\t\"fmt\"\n\t\"github.com/pcapsync/pcapsync/internal/functrace\"\n)\n\nfunc f() {\n\tdefer functrace.Trace()()\n\tfmt.Println()\n}\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mustRewrite(t, "x.go", []byte(tc.in), false); string(got) != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct{ name, in string }{
		{"syntax", "package p\n\nfunc f( {\n"},
		{"blank import", "package p\n\nimport _ \"github.com/pcapsync/pcapsync/internal/functrace\"\n\nfunc f() {}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := rewrite("x.go", []byte(tc.in), false); err == nil {
				t.Error("no error")
			}
		})
	}
}
