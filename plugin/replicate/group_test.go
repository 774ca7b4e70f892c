package replicate

import "testing"

// TestGroupsCountApart: each Group sums the counters of its own runs
// only, so that two job servers in one process (or a host loading two
// replicators) report their own totals.
func TestGroupsCountApart(t *testing.T) {
	s := startServer(t)
	src := s.newDB(t, "src")
	seedSource(t, s, src, 20)
	groups := []*Group{new(Group), new(Group)}
	var runs []Stats
	for _, g := range groups {
		res := runRep(t, testRep(s, src, s.newDB(t, "tgt")), Options{Group: g})
		runs = append(runs, res.Stats)
	}
	for i, g := range groups {
		got, run := g.Stats(), runs[i]
		if got.DocsRead != run.DocsRead || got.DocsWritten != run.DocsWritten || got.RevisionsChecked != run.RevisionsChecked ||
			got.CheckpointsSuccess == 0 || got.WorkersStarted == 0 {
			t.Errorf("group %d totals %+v; its run read %d, wrote %d, checked %d", i, got, run.DocsRead, run.DocsWritten, run.RevisionsChecked)
		}
	}
}
