package timeline

// Merge is the timeline of several servers' timelines of the same
// range and step (a federated console's): their series one after
// another, each marked with its server (servers[i] is parts[i]'s), and
// their coverage summed; the unindexed files named with their server,
// at most maxNamed; the errors joined, each with its server. parts
// must not be empty; a part of another range or step is left out and
// said in the coverage's error.
func Merge(parts []Timeline, servers []string) Timeline {
	t := parts[0]
	t.Agents, t.Coverage = []Series{}, TimelineCoverage{Named: []string{}}
	var errs []string
	for i, p := range parts {
		if !p.Since.Equal(t.Since) || !p.Until.Equal(t.Until) || p.StepNs != t.StepNs || p.Points != t.Points {
			errs = append(errs, servers[i]+": a timeline of another range or step, left out")
			continue
		}
		for _, s := range p.Agents {
			if len(s.Packets) != t.Points || len(s.Bytes) != t.Points || len(s.Drops) != t.Points {
				errs = append(errs, servers[i]+": agent "+s.Agent+": a series of another length, left out")
				continue
			}
			s.Server = servers[i]
			t.Agents = append(t.Agents, s)
		}
		c, pc := &t.Coverage, p.Coverage
		c.Agents += pc.Agents
		c.Files += pc.Files
		c.Blocks += pc.Blocks
		c.Skipped += pc.Skipped
		c.Unindexed += pc.Unindexed
		c.NoDrops += pc.NoDrops
		c.Summaries += pc.Summaries
		c.IndexRead += pc.IndexRead
		for _, n := range pc.Named {
			if len(c.Named) < maxNamed {
				c.Named = append(c.Named, servers[i]+": "+n)
			}
		}
		if pc.Error != "" {
			errs = append(errs, servers[i]+": "+pc.Error)
		}
	}
	for i, e := range errs {
		if i > 0 {
			t.Coverage.Error += "; "
		}
		t.Coverage.Error += e
	}
	return t
}
