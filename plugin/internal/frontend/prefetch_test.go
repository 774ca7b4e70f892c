package frontend

import (
	"fmt"
	"testing"

	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/plugin/kv"
	"github.com/couchepi/couchepi/plugin/kv/kvtest"
)

// TestBatchReadsJobsAtOnce: a batch of new docs reads their jobs from the
// store in a few requests, not one round trip per doc (on etcd, loaded by
// acceptors, that made 1,000 docs take over a minute to become jobs, #39).
func TestBatchReadsJobsAtOnce(t *testing.T) {
	for _, n := range []int{10, 200} {
		t.Run(fmt.Sprint(n, " docs"), func(t *testing.T) {
			store := &kvtest.RoundTrips{Store: kv.NewMemory()}
			fx := newFixtureOn(t, store)
			var evs []hooks.DocWrite
			for i := 0; i < n; i++ {
				id := fmt.Sprintf("d%03d", i)
				evs = append(evs, fx.svc.put("_replicator", id, []byte(doc(id, "t"+id, ""))))
			}
			before := store.Count()
			if err := fx.f.AfterDocWrites(fx.ctx, "_replicator", evs); err != nil {
				t.Fatal(err)
			}
			trips := store.Count() - before
			t.Logf("%d docs: %d round trips", n, trips)
			if trips > 5 {
				t.Errorf("%d new docs took %d store round trips, want a few", n, trips)
			}
			if got := len(fx.jobs()); got != n {
				t.Fatalf("%d jobs, want %d", got, n)
			}
		})
	}
}

// TestStopReplacedOneRoundTrip: the check a write of a _replicator doc
// waits for (is there a run to stop?) reads the db's position and the
// doc's job in one request once the db's uuid is known, not one after the
// other, and a create (no revision named) reads nothing: on a loaded etcd
// each round trip is what a doc write waits for (#39).
func TestStopReplacedOneRoundTrip(t *testing.T) {
	store := &kvtest.RoundTrips{Store: kv.NewMemory()}
	fx := newFixtureOn(t, store)
	fx.write("_replicator", "first", doc("first", "t0", "")) // the db has a position
	for i, tc := range []struct {
		doc  string
		want int
	}{
		{doc("new0", "tnew0", ""), 0},
		{doc("new1", "tnew1", ""), 0},
		// Edits that leave the replication as it is (a changed one holds
		// the job too, which is the stop itself).
		{doc("first", "t0", `,"_rev":"1-a","note":1`), 2}, // learns the db's uuid
		{doc("first", "t0", `,"_rev":"1-a","note":2`), 1},
		{doc("new2", "tnew2", `,"_rev":"1-b"`), 1}, // names a revision: checked
	} {
		before := store.Count()
		fx.f.StopReplaced(fx.ctx, "_replicator", []byte(tc.doc))
		if got := store.Count() - before; got > tc.want {
			t.Errorf("write %d (%s): %d store round trips before it is stored, want %d", i, tc.doc, got, tc.want)
		}
	}
}
