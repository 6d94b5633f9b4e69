package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/pcapsync/pcapsync/internal/pki"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// readToken reads a shared token from file (pki.ReadToken); an empty
// one is a usage error.
func readToken(file string, log *slog.Logger) (string, error) {
	tok, err := pki.ReadToken(file, log)
	if errors.Is(err, pki.ErrEmptyToken) {
		return "", fmt.Errorf("%w: --token-file: %w", errUsage, err)
	}
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	return tok, nil
}

// logCertificate logs when the configured certificate expires
// (pki.LogCertificates).
func logCertificate(log *slog.Logger, cfg *tls.Config, file string) {
	pki.LogCertificates(log, cfg, file)
}

// runGenCerts writes a CA, a collector certificate and agent client
// certificates for mutual TLS (see pki.WriteSet).
func runGenCerts(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("gen certs", `pcapsync gen certs --dir DIR --collector NAME[,IP...] --agents NAME[,NAME...] [--days N]

Writes a private CA (ca.pem, ca-key.pem), a collector certificate for
the names and addresses agents dial it by (collector.pem,
collector-key.pem) and a client certificate per agent, whose CN and DNS
name is the agent's name (agent-NAME.pem, agent-NAME-key.pem). A CA
already in DIR is reused, so agents can be added later; existing files
are kept, never overwritten. Keys are written 0600. Keep ca-key.pem off
the agents: they need ca.pem and their own pair only.`, stderr)
	dir := fs.String("dir", "", "directory to write to (created 0700 if missing) (required)")
	coll := fs.String("collector", "", "host names and IP addresses of the collector, comma-separated; the first is its CN")
	agents := fs.String("agents", "", "agent names, comma-separated")
	days := fs.Int("days", 365, "validity of the collector and agent certificates, in days (the CA: 10 years)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	case *dir == "":
		return fmt.Errorf("%w: gen certs needs --dir", errUsage)
	case *coll == "" && *agents == "":
		return fmt.Errorf("%w: gen certs needs --collector or --agents (or both)", errUsage)
	case *days < 1 || *days > 10*365:
		return fmt.Errorf("%w: --days %d out of range 1..3650", errUsage, *days)
	}
	set := pki.Set{Validity: time.Duration(*days) * 24 * time.Hour}
	for _, n := range splitList(*coll) {
		set.Collector = append(set.Collector, strings.Trim(n, "[]"))
	}
	for _, n := range splitList(*agents) {
		if err := wire.ValidateName(n); err != nil {
			return fmt.Errorf("%w: --agents: %w", errUsage, err)
		}
		set.Agents = append(set.Agents, n)
	}
	written, kept, err := pki.WriteSet(*dir, set)
	for _, f := range kept {
		fmt.Fprintf(stdout, "kept    %s\n", f)
	}
	for _, f := range written {
		fmt.Fprintf(stdout, "wrote   %s\n", f)
	}
	return err
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}
