package journal

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// streamOf returns f's JOURNAL_STREAM value.
func streamOf(t *testing.T, f *os.File) string {
	t.Helper()
	v, ok := Value(f)
	if !ok {
		t.Fatalf("%s: no device and inode", f.Name())
	}
	return v
}

func TestStream(t *testing.T) {
	dir := t.TempDir()
	a, err := os.Create(filepath.Join(dir, "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := os.Create(filepath.Join(dir, "b"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	env := streamOf(t, a)
	for _, tc := range []struct {
		name string
		w    any
		env  string
		want bool
	}{
		{"the stream", a, env, true},
		{"another file", b, env, false},
		{"no variable", a, "", false},
		{"not a file", &bytes.Buffer{}, env, false},
		{"no colon", a, strings.ReplaceAll(env, ":", ""), false},
		{"not numbers", a, "x:y", false},
		{"inode only", a, ":" + strings.SplitN(env, ":", 2)[1], false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(Env, tc.env)
			w := tc.w.(interface{ Write([]byte) (int, error) })
			if got := Stream(w); got != tc.want {
				t.Errorf("Stream with %s=%q: %v, want %v", Env, tc.env, got, tc.want)
			}
		})
	}
}

func TestPriority(t *testing.T) {
	for _, tc := range []struct {
		l    slog.Level
		want string
	}{
		{slog.LevelError + 4, "<3>"},
		{slog.LevelError, "<3>"},
		{slog.LevelWarn + 1, "<4>"},
		{slog.LevelWarn, "<4>"},
		{slog.LevelInfo, "<6>"},
		{slog.LevelInfo - 1, "<7>"},
		{slog.LevelDebug, "<7>"},
	} {
		if got := Prefix(tc.l); got != tc.want {
			t.Errorf("Prefix(%v) = %q, want %q", tc.l, got, tc.want)
		}
	}
}

// TestHandler: every line of a text and a JSON handler, those derived
// with WithAttrs and WithGroup included, is the handler's own line
// with its level's priority before it, from concurrent loggers too.
func TestHandler(t *testing.T) {
	opts := &slog.HandlerOptions{Level: slog.LevelDebug, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}
	for _, tc := range []struct {
		name string
		new  func(w io.Writer) slog.Handler
	}{
		{"text", func(w io.Writer) slog.Handler { return slog.NewTextHandler(w, opts) }},
		{"json", func(w io.Writer) slog.Handler { return slog.NewJSONHandler(w, opts) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got, plain bytes.Buffer
			log := func(l *slog.Logger) {
				l.Debug("d", "n", 1)
				l.Info("i", "s", "two words")
				l = l.With("agent", "a1").WithGroup("g")
				l.Warn("w", "err", "x\ny")
				l.Error("e")
			}
			log(slog.New(Handler(&got, tc.new)))
			log(slog.New(tc.new(&plain)))
			gotLines := strings.Split(strings.TrimSuffix(got.String(), "\n"), "\n")
			plainLines := strings.Split(strings.TrimSuffix(plain.String(), "\n"), "\n")
			if len(gotLines) != len(plainLines) {
				t.Fatalf("%d lines, want %d:\n%s", len(gotLines), len(plainLines), got.String())
			}
			for i, p := range []string{"<7>", "<6>", "<4>", "<3>"} {
				if want := p + plainLines[i]; gotLines[i] != want {
					t.Errorf("line %d: %q, want %q", i, gotLines[i], want)
				}
			}
		})
	}
	t.Run("concurrent", func(t *testing.T) {
		var out bytes.Buffer
		l := slog.New(Handler(&out, func(w io.Writer) slog.Handler { return slog.NewTextHandler(w, opts) }))
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				l := l.With("g", g)
				for i := range 100 {
					if i%2 == 0 {
						l.Warn("w")
					} else {
						l.Info("i")
					}
				}
			})
		}
		wg.Wait()
		for _, line := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
			if !strings.HasPrefix(line, "<4>level=WARN") && !strings.HasPrefix(line, "<6>level=INFO") {
				t.Fatalf("line %q: prefix and level disagree", line)
			}
		}
	})
}
