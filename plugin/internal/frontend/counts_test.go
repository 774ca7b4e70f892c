package frontend

import "testing"

// TestStatsPerFrontend: each frontend counts its own events, so that two
// replicators in one process report their own (issue 32).
func TestStatsPerFrontend(t *testing.T) {
	a, b := newFixture(t), newFixture(t)
	a.write("_replicator", "r1", doc("r1", "t1", ""))
	a.advance(1e9)
	a.write("_replicator", "r1", doc("r1", "t2", "")) // replaced: an add
	a.write("_replicator", "r1", "")
	if err := b.f.StartCatchUp(b.ctx); err != nil { // reads _replicator from its start
		t.Fatal(err)
	}
	b.write("_replicator", "r1", doc("r1", "t1", ""))
	for _, tc := range []struct {
		name string
		fx   *fixture
		want Stats
	}{
		{"a", a, Stats{JobsAdded: 2, JobsRemoved: 1}},
		{"b", b, Stats{JobsAdded: 1, DBScans: 1}},
	} {
		if got := tc.fx.f.Stats(); got != tc.want {
			t.Errorf("frontend %s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
