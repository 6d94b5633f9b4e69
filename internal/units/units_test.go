package units

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  error // what the error wraps; nil for none
	}{
		{"0", 0, nil},
		{"512", 512, nil},
		{" 64M ", 64 << 20, nil},
		{"1GiB", 1 << 30, nil},
		{"2K", 2048, nil},
		{"3KB", 3000, nil},
		{"5TB", 5e12, nil},
		{"7B", 7, nil},
		{"4294967296T", 0, ErrRange},
		{"-1", 0, ErrSyntax},
		{"1.5G", 0, ErrSyntax},
		{"M", 0, ErrSyntax},
		{"10 M", 10 << 20, nil}, // a space before the suffix is allowed
		{"0x10", 0, ErrSyntax},
		{"", 0, ErrSyntax},
	} {
		got, err := ParseSize(tc.in)
		switch {
		case tc.err == nil && (err != nil || got != tc.want):
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		case tc.err != nil && !errors.Is(err, tc.err):
			t.Errorf("ParseSize(%q) = %d, %v; want an error wrapping %q", tc.in, got, err, tc.err)
		case tc.err != nil && !strings.Contains(err.Error(), strconv.Quote(tc.in)):
			t.Errorf("ParseSize(%q): error %q does not name the size", tc.in, err)
		}
	}
}
