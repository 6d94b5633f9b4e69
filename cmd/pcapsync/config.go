package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/spf13/pflag"
)

// maxConfigFile is the largest configuration file read: settings for
// one process are a few kilobytes.
const maxConfigFile = 1 << 20

// configFile is a configuration file as docs/configuration.md defines
// it: one "name = value" per line, name a long flag of the command.
type configFile struct {
	path     string
	settings []setting
}

// setting is one line of a configuration file.
type setting struct {
	line        int
	name, value string
	bare        bool // "name" alone: true, for a boolean flag
}

// readConfigFile reads and parses path; its errors name the file and
// the line.
func readConfigFile(path string) (*configFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigFile+1))
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	if len(data) > maxConfigFile {
		return nil, fmt.Errorf("%s: larger than %d bytes: not a configuration file", path, maxConfigFile)
	}
	return parseConfig(path, data)
}

// parseConfig parses the text of a configuration file.
func parseConfig(path string, data []byte) (*configFile, error) {
	cf := &configFile{path: path}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, maxConfigFile+1)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if n == 1 {
			line = strings.TrimPrefix(line, "\uFEFF")
		}
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseSetting(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		s.line = n
		cf.settings = append(cf.settings, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cf, nil
}

func parseSetting(line string) (setting, error) {
	if !utf8.ValidString(line) {
		return setting{}, errors.New("not UTF-8 text")
	}
	name, value, hasValue := strings.Cut(line, "=")
	name, value = strings.TrimSpace(name), strings.TrimSpace(value)
	switch {
	case strings.HasPrefix(name, "-"):
		return setting{}, fmt.Errorf("%q: write the flag's name without dashes (%q)", name, strings.TrimLeft(name, "-"))
	case name == "" || strings.ContainsAny(name, " \t\"'"):
		return setting{}, fmt.Errorf("%q: want NAME = VALUE, NAME a long flag's name", line)
	case !hasValue:
		return setting{name: name, bare: true}, nil
	}
	if strings.HasPrefix(value, `"`) {
		u, err := strconv.Unquote(value)
		if err != nil {
			return setting{}, fmt.Errorf("%s: the quoted value %s does not end with its quote or holds a bad escape", name, value)
		}
		value = u
	}
	return setting{name: name, value: value}, nil
}

// check refuses a setting no flag of fs has (unless foreign, if not
// nil, says it is another command's, to be skipped), a flag set on two
// lines that can be given once only, and the --config key itself.
func (cf *configFile) check(fs *pflag.FlagSet, command string, foreign func(name string) bool) error {
	first := map[string]int{}
	for _, s := range cf.settings {
		f := fs.Lookup(s.name)
		switch {
		case s.name == "config":
			return fmt.Errorf("%s:%d: config: a configuration file cannot name another one", cf.path, s.line)
		case f == nil && foreign != nil && foreign(s.name):
			continue
		case f == nil || f.Name == "help" || f.Name == "version":
			return fmt.Errorf("%s:%d: unknown setting %q: %s has no --%s", cf.path, s.line, s.name, command, s.name)
		case s.bare && f.NoOptDefVal == "":
			return fmt.Errorf("%s:%d: %s: needs a value (%s = VALUE)", cf.path, s.line, s.name, s.name)
		}
		if at, seen := first[f.Name]; seen {
			if _, ok := f.Annotations[annRepeatable]; !ok {
				return fmt.Errorf("%s:%d: %s: set again (first on line %d); it takes one value", cf.path, s.line, s.name, at)
			}
		} else {
			first[f.Name] = s.line
		}
	}
	return nil
}

// apply sets flag name (a canonical name) from every line naming it.
func (cf *configFile) apply(fs *pflag.FlagSet, name string) error {
	for _, s := range cf.settings {
		f := fs.Lookup(s.name)
		if f == nil || f.Name != name {
			continue
		}
		v := s.value
		if s.bare {
			v = f.NoOptDefVal
		}
		if err := fs.Set(name, v); err != nil {
			return fmt.Errorf("%w: %s:%d: %s = %q: %w", errUsage, cf.path, s.line, s.name, v, err)
		}
	}
	return nil
}
