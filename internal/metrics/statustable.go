package metrics

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// statusColumns are the columns of an agent's row.
const statusColumns = "AGENT\tADDRESS\tTRANSPORT\tSTATE\tPKT/S\tBYTES/S\tPACKETS\tKERNEL DROPS\tAGENT DROPS\tLOST BATCHES\tLAST SEQ\tLAG\tOLDEST KEPT\tVERSION"

// WriteTable prints st as a table for a terminal: one row per agent,
// connected ones first (the status page sorts by name).
func WriteTable(w io.Writer, st Status) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, statusColumns)
	writeRows(tw, "", st)
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d agents, %d connected; rates over the last %.1fs; drops as the agents last reported them; at %s\n",
		len(st.Agents), connected(st), st.RateWindow, st.Time.Format(time.RFC3339))
	if err == nil {
		err = writeNotes(w, st)
	}
	return err
}

// writeRows writes st's agents, connected ones first, each row after
// prefix.
func writeRows(w io.Writer, prefix string, st Status) {
	for pass := range 2 {
		for _, a := range st.Agents {
			if a.Connected != (pass == 0) {
				continue
			}
			fmt.Fprintf(w, "%s%s\t%s\t%s\t%s\t%.0f\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", prefix,
				a.Name, orDash(a.Address), orDash(a.Transport), state(a, st.Time),
				a.PacketsPerSecond, humanBytes(a.BytesPerSecond), a.Packets, a.KernelDrops, a.AgentDrops,
				a.LostBatches, a.LastSeq, a.Lag, oldest(a.OldestPacket), orDash(a.Version))
		}
	}
}

// writeNotes writes what a table's rows do not say: a writer's
// partitions, retention that cannot keep up.
func writeNotes(w io.Writer, st Status) error {
	var err error
	if st.Kafka != nil {
		err = writeKafka(w, st.Kafka)
	}
	if err == nil && len(st.Retention.Short) > 0 {
		_, err = fmt.Fprintf(w, "RETENTION CANNOT FREE ENOUGH (rules: %s): only each agent's newest file and the open ones are left; on a full disk nothing more is written or acknowledged\n",
			strings.Join(st.Retention.Short, ", "))
	}
	return err
}

// ServerStatus is one server's part of a table of many (pcapsync
// status --from A,B,C): its Status, or why it gave none.
type ServerStatus struct {
	Server string // HOST:PORT
	Status Status // zero when Down is set
	// Down is the server's outcome when it gave no status ("unreachable",
	// "refused", "timed out", "failed"), Reason why; "" when it answered.
	Down, Reason string
}

// WriteServersTable prints the agents of many servers as one table, a
// SERVER column first: each server's agents as WriteTable orders them,
// a server that gave no status as one row saying so (its reason after
// the table), then each server's notes (partitions, retention).
func WriteServersTable(w io.Writer, servers []ServerStatus) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\t"+statusColumns)
	agents, conn, up := 0, 0, 0
	for _, s := range servers {
		if s.Down != "" {
			fmt.Fprintf(tw, "%s\t-\t-\t-\tSERVER %s\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\n", s.Server, strings.ToUpper(s.Down))
			continue
		}
		up++
		agents, conn = agents+len(s.Status.Agents), conn+connected(s.Status)
		writeRows(tw, s.Server+"\t", s.Status)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d servers, %d answered; %d agents, %d connected; drops as the agents last reported them\n",
		len(servers), up, agents, conn)
	for _, s := range servers {
		switch {
		case err != nil:
		case s.Down != "":
			_, err = fmt.Fprintf(w, "server %s: %s: %s\n", s.Server, s.Down, s.Reason)
		case s.Status.Kafka != nil || len(s.Status.Retention.Short) > 0:
			if _, err = fmt.Fprintf(w, "\nserver %s: ", s.Server); err == nil {
				err = writeNotes(w, s.Status)
			}
		}
	}
	return err
}

// oldest is the oldest kept packet's time, to the second, or "-".
func oldest(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05Z")
}

// state is "up 1h2m3s" (since the session began) or "down 4m" (since
// the last batch, or the session began).
func state(a AgentStatus, now time.Time) string {
	if a.Connected {
		return "up " + roundAge(now.Sub(a.Since))
	}
	last := a.LastBatch
	if last.IsZero() || a.Since.After(last) {
		last = a.Since
	}
	if last.IsZero() {
		return "down"
	}
	return "down " + roundAge(now.Sub(last))
}

func roundAge(d time.Duration) string {
	if d < time.Hour {
		return d.Round(time.Second).String()
	}
	return d.Round(time.Minute).String()
}

func connected(st Status) int {
	n := 0
	for _, a := range st.Agents {
		if a.Connected {
			n++
		}
	}
	return n
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// humanBytes prints a byte rate with a binary prefix: 0, 512, 1.5K, 12M.
func humanBytes(v float64) string {
	const units = "KMGTP"
	if v < 1024 {
		return fmt.Sprintf("%.0f", v)
	}
	i := -1
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if v < 10 {
		return fmt.Sprintf("%.1f%c", v, units[i])
	}
	return fmt.Sprintf("%.0f%c", v, units[i])
}

// writeKafka prints a writer's partitions: one row each, "-" where not
// known yet.
func writeKafka(w io.Writer, k *KafkaStatus) error {
	if _, err := fmt.Fprintf(w, "\nkafka topic %s, group %s: %d partitions assigned, lag %d records\n",
		k.Topic, k.Group, len(k.Partitions), k.Lag); err != nil || len(k.Partitions) == 0 {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tCOMMITTED\tEND\tLAG")
	for _, p := range k.Partitions {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", p.Partition, known(p.Committed), known(p.End), known(p.Lag))
	}
	return tw.Flush()
}

// known prints v, or "-" for -1 (not known yet).
func known(v int64) string {
	if v < 0 {
		return "-"
	}
	return fmt.Sprint(v)
}
