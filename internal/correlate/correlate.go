package correlate

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/query"
)

// Run correlates the packets cfg selects and returns the report. If
// unmatched is not nil, it receives a pcapng of the packets seen at one
// agent and never at another (in any pair), in timestamp order, each on
// an interface named as in the files ("web1:eth0"), with nanosecond
// timestamps; it is valid pcapng also when Run fails after it began.
//
// The packets are read by one query (query.Prepare, Prepared.Each)
// over all the agents, merged in timestamp order. Memory is the query's (Config.ReorderMem
// plus a reader per agent) plus the packets of the last Window, with
// their bytes when unmatched is not nil.
func Run(ctx context.Context, cfg Config, unmatched io.Writer) (Report, error) {
	if err := cfg.Validate(); err != nil {
		return Report{}, err
	}
	for _, a := range cfg.Agents {
		if st, err := os.Stat(filepath.Join(cfg.Dir, a)); err != nil || !st.IsDir() {
			return Report{}, fmt.Errorf("agent %s: %w below %s", a, ErrNoAgent, cfg.Dir)
		}
	}
	qp, err := query.Prepare(ctx, cfg.query())
	if err != nil {
		return Report{}, err
	}
	return runSource(ctx, cfg, qp, unmatched)
}

// Source gives the packets of a correlation, every agent's merged in
// timestamp order, as *query.Prepared's Each does: each packet with its
// Agent, its interface numbered from 0 in the order of first packets
// (Iface) and described (Interface), Data valid until fn returns.
type Source interface {
	Each(ctx context.Context, fn func(*query.Packet) error) (query.Result, error)
}

// RunSource is Run over the packets src gives instead of cfg.Dir's
// (pcapsync correlate --from: the servers' query listeners): cfg's
// Agents, Window and selection (for the unmatched pcapng's comment)
// apply; Dir, ReorderMem and Logger are unused, an agent without
// packets counts none. A packet of an agent not in cfg.Agents is an
// error.
func RunSource(ctx context.Context, cfg Config, src Source, unmatched io.Writer) (Report, error) {
	if err := cfg.ValidateAgents(); err != nil {
		return Report{}, err
	}
	return runSource(ctx, cfg, src, unmatched)
}

func runSource(ctx context.Context, cfg Config, src Source, unmatched io.Writer) (Report, error) {
	c := &run{cfg: cfg}
	err := c.read(ctx, src, unmatched)
	return c.rep, err
}

type run struct {
	cfg     Config
	rep     Report
	ifAgent []int // the query's interfaces (Packet.Iface): agent index
	ifOut   []int // the query's interfaces: the unmatched writer's, -1 until written
	ifaces  []pcapfile.Interface
	w       *pcapfile.NgWriter
}

// read matches the query's packets and fills c.rep.
func (c *run) read(ctx context.Context, qp Source, unmatched io.Writer) error {
	var emit func(*packet) error
	var bw *bufio.Writer
	if unmatched != nil {
		bw = bufio.NewWriterSize(unmatched, 256<<10)
		var err error
		c.w, err = pcapfile.NewNgWriter(bw, pcapfile.SectionInfo{OS: "Linux", UserAppl: "pcapsync correlate", Comment: c.cfg.describe()})
		if err != nil {
			return fmt.Errorf("writing unmatched packets: %w", err)
		}
		emit = c.write
	}
	window := c.cfg.window()
	m := newMatcher(len(c.cfg.Agents), int64(window), emit)
	res, err := qp.Each(ctx, func(p *query.Packet) error {
		if p.Iface == len(c.ifAgent) {
			if err := c.learn(p); err != nil {
				return err
			}
		}
		return m.add(c.ifAgent[p.Iface], p.Iface, p.Timestamp, p.OrigLen, p.Interface.LinkType, p.Data)
	})
	c.rep.FilesRead = res.FilesRead
	if err == nil {
		err = m.flush()
	}
	c.report(m, window.Nanoseconds())
	if bw != nil {
		if ferr := bw.Flush(); ferr != nil && err == nil {
			err = fmt.Errorf("writing unmatched packets: %w", ferr)
		}
	}
	return err
}

// learn maps the query's next interface, p's, to its agent.
func (c *run) learn(p *query.Packet) error {
	a := slices.Index(c.cfg.Agents, p.Agent)
	if a < 0 {
		return fmt.Errorf("reading the query: interface %q of no agent selected", p.Interface.Name)
	}
	c.ifAgent = append(c.ifAgent, a)
	c.ifOut = append(c.ifOut, -1)
	c.ifaces = append(c.ifaces, *p.Interface)
	return nil
}

// write writes p to the unmatched pcapng.
func (c *run) write(p *packet) error {
	o := &c.ifOut[p.iface]
	if *o < 0 {
		i, err := c.w.AddInterface(c.ifaces[p.iface])
		if err != nil {
			return fmt.Errorf("writing unmatched packets: %w", err)
		}
		*o = i
	}
	if err := c.w.WritePacket(*o, p.ts, p.orig, p.data); err != nil {
		return fmt.Errorf("writing unmatched packets: %w", err)
	}
	c.rep.Unmatched++
	return nil
}

// report fills c.rep from m.
func (c *run) report(m *matcher, window int64) {
	c.rep.WindowNS = window
	c.rep.DelayNote = DelayCaveat
	c.rep.Agents = c.rep.Agents[:0]
	for i, a := range c.cfg.Agents {
		c.rep.Agents = append(c.rep.Agents, Agent{Name: a, Packets: m.counts[i]})
	}
	c.rep.Pairs = c.rep.Pairs[:0]
	for i := range c.cfg.Agents {
		for j := i + 1; j < len(c.cfg.Agents); j++ {
			ps := m.pairs[m.pairIndex(i, j)]
			c.rep.Pairs = append(c.rep.Pairs, Pair{
				From: c.cfg.Agents[i], To: c.cfg.Agents[j],
				AtFrom: m.counts[i], AtTo: m.counts[j],
				Matched: ps.matched, FromNotTo: ps.fromNotTo, ToNotFrom: ps.toNotFrom,
				DupFrom: ps.dupFrom, DupTo: ps.dupTo,
				Delay: ps.delay.summary(),
			})
		}
	}
}
