package main

import (
	"bufio"
	"bytes"
	"os"
	"strings"
)

// Limits of the servers a command asks at once (--from a,b,c and
// --servers FILE together), and of the file that lists them.
const (
	maxServers     = 256
	maxServersFile = 1 << 20
)

// serverList returns the servers of --from (one, or several separated
// by commas) and of --servers FILE (one per line; blank lines and lines
// starting with '#' ignored), --from's first, each as HOST:PORT
// (serverAddr: HOST:PORT, [V6]:PORT or https://HOST:PORT; a host is a
// name or an address, names resolved when asked). A server named twice,
// more than maxServers, or a file that cannot be read or is larger than
// maxServersFile is a usage error. Neither given: none.
func serverList(from, file string, insecure bool) ([]string, error) {
	var given []string
	for s := range strings.SplitSeq(from, ",") {
		if s = strings.TrimSpace(s); s != "" {
			given = append(given, s)
		}
	}
	if from != "" && len(given) == 0 {
		return nil, usageError("--from %q: want HOST:PORT, or several separated by commas", from)
	}
	if file != "" {
		lines, err := readServersFile(file)
		if err != nil {
			return nil, err
		}
		given = append(given, lines...)
	}
	if len(given) > maxServers {
		return nil, usageError("%d servers, at most %d at once", len(given), maxServers)
	}
	seen := make(map[string]bool, len(given))
	addrs := make([]string, 0, len(given))
	for _, s := range given {
		addr, err := serverAddr(s, insecure)
		if err != nil {
			return nil, err
		}
		if seen[addr] {
			return nil, usageError("server %s named twice", addr)
		}
		seen[addr] = true
		addrs = append(addrs, addr)
	}
	return addrs, nil
}

// readServersFile reads --servers FILE: one server per line, blank
// lines and '#' comments skipped.
func readServersFile(file string) ([]string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, usageError("--servers: %v", err)
	}
	if len(b) > maxServersFile {
		return nil, usageError("--servers %s: %d bytes, at most %d", file, len(b), maxServersFile)
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, maxServersFile)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.ContainsAny(line, " \t,") {
			return nil, usageError("--servers %s line %d: %q: one server per line", file, n, line)
		}
		out = append(out, line)
	}
	if err := sc.Err(); err != nil {
		return nil, usageError("--servers %s: %v", file, err)
	}
	if len(out) == 0 {
		return nil, usageError("--servers %s: no server in it (one HOST:PORT per line)", file)
	}
	return out, nil
}
