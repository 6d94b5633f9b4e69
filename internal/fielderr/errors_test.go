package fielderr

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
)

func flag(key string) string {
	return map[string]string{"agent.SnapLen": "--snaplen", "serve.Tap.QueueSize": "--tap-queue"}[key]
}

// TestRender: Error names fields by their path, Render by the name
// function (the path where it has none), through %w and errors.Join,
// and wrapped errors stay reachable for errors.Is.
func TestRender(t *testing.T) {
	snap := Errorf("agent: snaplen %d out of range ({agent.SnapLen})", 0)
	queue := Errorf("tap: queue %q: %w ({serve.Tap.QueueSize}, {serve.Tap.Other})", "{agent.SnapLen}", io.EOF)
	tests := []struct {
		name       string
		err        error
		plain, cli string
		keys       []string
		wrapsEOF   bool
	}{
		{"one", snap, "agent: snaplen 0 out of range (SnapLen)", "agent: snaplen 0 out of range (--snaplen)", []string{"agent.SnapLen"}, false},
		{"arguments are no fields", queue, `tap: queue "{agent.SnapLen}": EOF (Tap.QueueSize, Tap.Other)`, `tap: queue "{agent.SnapLen}": EOF (--tap-queue, Tap.Other)`,
			[]string{"serve.Tap.QueueSize", "serve.Tap.Other"}, true},
		{"wrapped", fmt.Errorf("usage: %w", snap), "usage: agent: snaplen 0 out of range (SnapLen)", "usage: agent: snaplen 0 out of range (--snaplen)", nil, false},
		{"joined", errors.Join(snap, fmt.Errorf("x: %w", queue)), "agent: snaplen 0 out of range (SnapLen)\nx: tap: queue \"{agent.SnapLen}\": EOF (Tap.QueueSize, Tap.Other)",
			"agent: snaplen 0 out of range (--snaplen)\nx: tap: queue \"{agent.SnapLen}\": EOF (--tap-queue, Tap.Other)", nil, true},
		{"not one", io.EOF, "EOF", "EOF", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.plain {
				t.Errorf("Error() = %q, want %q", got, tt.plain)
			}
			if got := Render(tt.err, flag); got != tt.cli {
				t.Errorf("Render = %q, want %q", got, tt.cli)
			}
			if errors.Is(tt.err, io.EOF) != tt.wrapsEOF {
				t.Errorf("errors.Is(EOF) = %v, want %v", !tt.wrapsEOF, tt.wrapsEOF)
			}
			if fe, ok := tt.err.(*Error); ok && !slices.Equal(fe.Keys(), tt.keys) {
				t.Errorf("Keys() = %q, want %q", fe.Keys(), tt.keys)
			}
		})
	}
	if Render(nil, flag) != "" {
		t.Error("Render(nil) is not empty")
	}
	if s := Errorf("%s ({agent.SnapLen})", mark).Error(); strings.Contains(s, mark) {
		t.Errorf("an argument holding the mark: %q", s)
	}
	parts := fmt.Sprintf("%s 5, %s 6", Key("serve.Tap.QueueSize"), Key("agent.SnapLen"))
	k := Errorf("caps (%s) too large", parts)
	if got, want := Render(k, flag), "caps (--tap-queue 5, --snaplen 6) too large"; got != want {
		t.Errorf("Key: Render = %q, want %q", got, want)
	}
	if got, want := k.Error(), "caps (Tap.QueueSize 5, SnapLen 6) too large"; got != want {
		t.Errorf("Key: Error() = %q, want %q", got, want)
	}
}
