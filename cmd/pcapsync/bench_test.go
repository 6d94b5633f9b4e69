//go:build lab

package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

func TestBenchCommand(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string // substrings of stdout
	}{
		{"transport", []string{"bench", "transport", "--seconds", "0.05", "--rounds", "1", "--markdown"},
			[]string{"| TCP, 1 per write | 1 | 127 |", "| TCP, 1024 per write |", "| UDP, 15 per datagram | 15 | 1359 |"}},
		{"fanin", []string{"bench", "fanin", "--agents", "20", "--seconds", "0.5"},
			[]string{"agents connected", "20 of 20", "all written: met", "0 / 0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if err := run(context.Background(), tc.args, &out, &errOut); err != nil {
				t.Fatalf("%v\nstderr: %s", err, errOut.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}

func TestBenchUsage(t *testing.T) {
	for _, args := range [][]string{
		{"bench"},
		{"bench", "nope"},
		{"bench", "transport", "--rounds", "0"},
		{"bench", "fanin", "--agents", "0"},
		{"bench", "pipeline", "--rounds", "0"},
		{"bench", "pipeline", "--packets", "0"},
		{"bench", "live", "--rounds", "0"},
		{"bench", "live", "--generators", "0"},
		{"bench", "live", "--seconds", "0"},
		{"bench", "query", "--rounds", "0"},
		{"bench", "query", "--bytes", "1K"},
		{"bench", "query", "--span", "1m"},
		{"bench", "query", "--agents", "0"},
	} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), args, &out, &errOut); !errors.Is(err, errUsage) {
			t.Errorf("%q: err = %v, want a usage error", args, err)
		}
	}
}
