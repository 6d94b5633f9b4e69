package wire

import "fmt"

// MaxNameLen is the longest agent name.
const MaxNameLen = 64

// ValidateName checks that an agent name can serve as an identity and,
// unchanged, as a directory name on any filesystem: 1 to MaxNameLen
// bytes of ASCII letters, digits, '.', '_' and '-', not starting with
// '.' or '-'. That rules out "..", "/", NUL, control characters,
// absolute paths and hidden names. The error says what is wrong and where.
func ValidateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("agent name is empty: %w", ErrBadName)
	case len(name) > MaxNameLen:
		return fmt.Errorf("agent name is %d bytes, longer than %d: %w", len(name), MaxNameLen, ErrBadName)
	case name[0] == '.' || name[0] == '-':
		return fmt.Errorf("agent name %q starts with %q: %w", name, name[0], ErrBadName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-' {
			continue
		}
		return fmt.Errorf("agent name %q has byte %q at offset %d (allowed: letters, digits, '.', '_', '-'): %w", name, c, i, ErrBadName)
	}
	return nil
}
