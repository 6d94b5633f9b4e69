package correlate

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// DelayCaveat says what a pair's delay is; the table prints it under
// the pairs, the JSON carries it.
const DelayCaveat = "delay is tTo - tFrom, each on its own agent's clock: it includes the offset between the two clocks, so it can be negative"

// Report is what a correlation found.
type Report struct {
	WindowNS  int64   `json:"window_ns"`
	Agents    []Agent `json:"agents"`
	Pairs     []Pair  `json:"pairs"`
	Unmatched int64   `json:"unmatched_written"` // packets written to the unmatched pcapng
	FilesRead int     `json:"files_read"`
	DelayNote string  `json:"delay_note"`
}

// Agent is one capture point's count.
type Agent struct {
	Name    string `json:"name"`
	Packets int64  `json:"packets"`
}

// Pair is the matching of two agents' packets. AtFrom = Matched +
// FromNotTo + DupFrom, and AtTo = Matched + ToNotFrom + DupTo.
type Pair struct {
	From      string `json:"from"`
	To        string `json:"to"`
	AtFrom    int64  `json:"at_from"`
	AtTo      int64  `json:"at_to"`
	Matched   int64  `json:"matched"`
	FromNotTo int64  `json:"from_not_to"` // seen at From, never at To
	ToNotFrom int64  `json:"to_not_from"` // seen at To, never at From
	DupFrom   int64  `json:"dup_from"`    // extra copies at From of a packet matched
	DupTo     int64  `json:"dup_to"`
	Delay     Delay  `json:"delay"` // tTo - tFrom of the matched packets
}

// WriteTable writes r as a table for people.
func (r Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "from -> to\tat from\tat to\tmatched\tfrom, not to\tto, not from\tdup from\tdup to\tdelay min\tp50\tp90\tp99\tmax")
	for _, p := range r.Pairs {
		fmt.Fprintf(tw, "%s -> %s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t", p.From, p.To, p.AtFrom, p.AtTo, p.Matched, p.FromNotTo, p.ToNotFrom, p.DupFrom, p.DupTo)
		if p.Delay.Count == 0 {
			fmt.Fprint(tw, "-\t-\t-\t-\t-\n")
			continue
		}
		d := p.Delay
		fmt.Fprintf(tw, "%v\t%v\t%v\t%v\t%v\n", dur(d.Min), dur(d.P50), dur(d.P90), dur(d.P99), dur(d.Max))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "window %v; %s.\n", time.Duration(r.WindowNS), r.DelayNote)
	return err
}

func dur(ns int64) time.Duration { return time.Duration(ns) }
