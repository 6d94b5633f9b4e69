package units

import (
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  string // in the error; "" for none
	}{
		{"0", 0, ""},
		{"512", 512, ""},
		{" 64M ", 64 << 20, ""},
		{"1GiB", 1 << 30, ""},
		{"2K", 2048, ""},
		{"3KB", 3000, ""},
		{"5TB", 5e12, ""},
		{"7B", 7, ""},
		{"4294967296T", 0, "too large"},
		{"-1", 0, "want a whole number"},
		{"1.5G", 0, "want a whole number"},
		{"M", 0, "want a whole number"},
		{"10 M", 10 << 20, ""}, // a space before the suffix is allowed
		{"0x10", 0, "want a whole number"},
		{"", 0, "want a whole number"},
	} {
		got, err := ParseSize(tc.in)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseSize(%q) = %d, %v; want an error with %q", tc.in, got, err, tc.err)
		}
	}
}
