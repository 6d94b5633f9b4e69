package timeline

import (
	"runtime"
	"sync"
)

// maxTimelineWorkers bounds the agents a timeline reads at once.
const maxTimelineWorkers = 8

// all adds to t the series of the agents (in their order), read by up
// to GOMAXPROCS (at most maxTimelineWorkers) at once, each with a
// coverage of its own added to t's in the agents' order. At an error
// (ctx done, an agent's directory unreadable) t holds the agents
// before the first that failed.
func (b binner) all(dir string, agents []string, t *Timeline) error {
	type result struct {
		s   Series
		cov TimelineCoverage
		err error
	}
	res := make([]result, len(agents))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(len(agents), runtime.GOMAXPROCS(0), maxTimelineWorkers) {
		wg.Go(func() {
			for i := range next {
				r := &res[i]
				if r.err = b.ctx.Err(); r.err != nil {
					continue
				}
				ab := b
				ab.cov = &r.cov
				r.s, r.err = ab.agent(dir, agents[i])
			}
		})
	}
	for i := range agents {
		next <- i
	}
	close(next)
	wg.Wait()
	c := &t.Coverage
	for _, r := range res {
		if r.err != nil {
			return r.err
		}
		c.Agents++
		c.Files += r.cov.Files
		c.Blocks += r.cov.Blocks
		c.Skipped += r.cov.Skipped
		c.Unindexed += r.cov.Unindexed
		c.NoDrops += r.cov.NoDrops
		c.Summaries += r.cov.Summaries
		c.IndexRead += r.cov.IndexRead
		c.Named = append(c.Named, r.cov.Named[:min(len(r.cov.Named), maxNamed-len(c.Named))]...)
		t.Agents = append(t.Agents, r.s)
	}
	return nil
}
