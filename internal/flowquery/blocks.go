package flowquery

import (
	"context"
	"path/filepath"
	"strings"

	"github.com/pcapsync/pcapsync/internal/layout"
	"github.com/pcapsync/pcapsync/internal/query"
)

// Blocks returns what a query of q.CommunityID reads (query.Config.Blocks):
// the index blocks of the flow's records in the data files that hold
// them, and every block (a name without runs) of the files whose flows
// are not all known: without a flow file, with one that does not
// verify, or being written when listed (it may be published since: its
// flow file then holds records its .part lacked). The selection is q's
// agents, interfaces, range and Community ID; q.Filter is left to the
// query. pcapsync query --community-id and GET /query?community_id= use
// it alike.
func Blocks(ctx context.Context, q query.Config) (map[string][]query.BlockRun, error) {
	cfg := Config{Dir: q.Dir, Agents: q.Agents, Ifaces: q.Ifaces, Since: q.Since, Until: q.Until,
		CommunityID: q.CommunityID, Logger: q.Logger}
	blocks := map[string][]query.BlockRun{}
	name := func(p string) string { return strings.TrimSuffix(filepath.Base(p), layout.PartSuffix) }
	whole := map[string]bool{} // read whole: no runs, or not all flows known
	res, err := each(ctx, cfg, true, func(f *Flow) error {
		for _, part := range f.Parts {
			n := name(part.File)
			if len(part.Runs) == 0 {
				whole[n] = true
			}
			for _, r := range part.Runs {
				blocks[n] = append(blocks[n], query.BlockRun{First: r.First, Last: r.Last})
			}
		}
		return nil
	}, func() int { return 0 })
	if err != nil {
		return nil, err
	}
	for _, p := range res.Unflowed {
		whole[name(p)] = true
	}
	for n := range whole {
		blocks[n] = nil
	}
	return blocks, nil
}
