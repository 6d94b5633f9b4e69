package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pcapsync/pcapsync/internal/kafkarec"
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

// genCertsUsage is gen certs' help: a CA, a collector certificate and
// agent client certificates for mutual TLS (see pki.WriteSet).
const genCertsUsage = `Writes a private CA (ca.pem, ca-key.pem), a collector certificate for
the names and addresses agents dial it by (collector.pem,
collector-key.pem) and a client certificate per agent, whose CN and DNS
name is the agent's name (agent-NAME.pem, agent-NAME-key.pem). A CA
already in DIR is reused, so agents can be added later. A certificate
already in DIR is kept when it is what is asked (the names of
--collector, or the agent's name), signed by the CA, not expired, with
its key; otherwise it is reissued from the CA with a new key ("reissued
FILE (why)"), so rerun with new --collector names to add them. --days
alone does not reissue. Keys are written 0600. Keep ca-key.pem off the
agents: they need ca.pem and their own pair only.`

func genCertsCommand(s streams) *cobra.Command {
	return leaf("certs --dir DIR --collector NAME[,IP...] --agents NAME[,NAME...] [--days N]", "write a CA and certificates for mutual TLS", genCertsUsage, noArgs, func(fs *pflag.FlagSet) runFunc {
		dir := fs.String("dir", "", "directory to write to (created 0700 if missing) (required)")
		coll := fs.String("collector", "", "host names and IP addresses of the collector, comma-separated; the first is its CN")
		agents := fs.String("agents", "", "agent names, comma-separated")
		days := fs.Int("days", 365, "validity of the collector and agent certificates, in days (the CA: 10 years)")
		return func(context.Context, []string) error { return genCerts(s, *dir, *coll, *agents, *days) }
	})
}

// genCerts writes the certificates gen certs describes into dir.
func genCerts(s streams, dir, coll, agents string, days int) error {
	switch {
	case dir == "":
		return fmt.Errorf("%w: gen certs needs --dir", errUsage)
	case coll == "" && agents == "":
		return fmt.Errorf("%w: gen certs needs --collector or --agents (or both)", errUsage)
	case days < 1 || days > 10*365:
		return fmt.Errorf("%w: --days %d out of range 1..3650", errUsage, days)
	}
	set := pki.Set{Validity: time.Duration(days) * 24 * time.Hour}
	for _, n := range splitList(coll) {
		set.Collector = append(set.Collector, strings.Trim(n, "[]"))
	}
	for _, n := range splitList(agents) {
		if err := wire.ValidateName(n); err != nil {
			return fmt.Errorf("%w: --agents: %w", errUsage, err)
		}
		set.Agents = append(set.Agents, n)
	}
	res, err := pki.WriteSet(dir, set)
	for _, f := range res.Kept {
		fmt.Fprintf(s.stdout, "kept     %s\n", f)
	}
	for _, r := range res.Reissued {
		fmt.Fprintf(s.stdout, "reissued %s (%s)\nreissued %s\n", r.Cert, r.Why, r.Key)
	}
	for _, f := range res.Written {
		fmt.Fprintf(s.stdout, "wrote    %s\n", f)
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

// genAgentKeyUsage is gen kafka-agent-key's help.
const genAgentKeyUsage = `Derives an agent's Kafka record key from the topic's record key (the
--kafka-record-key file of ingest collectors and writers) and writes it
as a key file for that agent alone: give it to the agent as its
--kafka-record-key. The agent signs its records with it; writers, with
the topic's key, take records signed so for that agent only, so a host
holding one agent's key cannot write into another agent's files
(docs/kafka.md, "Record key"). The file is written 0600, and an
existing one is not replaced; without --out the key goes to standard
output.`

func genAgentKeyCommand(s streams) *cobra.Command {
	return leaf("kafka-agent-key --kafka-record-key FILE --agent NAME [--out FILE]", "derive an agent's own Kafka record key from the topic's",
		genAgentKeyUsage, noArgs, func(fs *pflag.FlagSet) runFunc {
			keyFile := fs.String("kafka-record-key", "", "the topic's record key file, as ingest collectors and writers have it (required)")
			agent := fs.String("agent", "", "the agent's name (required)")
			out := fs.String("out", "", "the agent's key file to write (created 0600; an existing file is an error); default: standard output")
			return func(context.Context, []string) error { return genAgentKey(s, *keyFile, *agent, *out) }
		})
}

// genAgentKey writes the key file of agent, derived from the topic's
// record key in keyFile, to out (standard output if "").
func genAgentKey(s streams, keyFile, agent, out string) error {
	if keyFile == "" || agent == "" {
		return usageError("gen kafka-agent-key needs --kafka-record-key and --agent")
	}
	b, err := os.ReadFile(keyFile)
	if err != nil {
		return err
	}
	k, err := kafkarec.ParseRecordKey(b)
	clear(b)
	if err != nil {
		return fmt.Errorf("%s: %w", keyFile, err)
	}
	line, err := k.AgentKeyFile(agent)
	if err != nil {
		return fmt.Errorf("%s: %w", keyFile, err)
	}
	defer clear(line)
	if out == "" {
		_, err = s.stdout.Write(line)
		return err
	}
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(line); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
