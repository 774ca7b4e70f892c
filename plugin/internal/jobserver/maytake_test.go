package jobserver

import (
	"math"
	"testing"

	"github.com/couchepi/couchepi/plugin/jobs"
)

// TestMayTakeSeenNoMutualDeferral: nodes starting jobs at once each run
// more than the others' published counts say; judged on one look at the
// leases, at most one of them defers (comparing its count now with the
// others' older ones, both deferred and the cluster started a few jobs a
// second, #39). A node the look shows ahead still defers.
func TestMayTakeSeenNoMutualDeferral(t *testing.T) {
	lease := func(id string, running int) jobs.LeaseInfo {
		return jobs.LeaseInfo{ID: id, Running: running, Capacity: 1000}
	}
	cases := []struct {
		name   string
		active map[string]int // each node's count now
		seen   map[string][]jobs.LeaseInfo
		want   map[string]bool
	}{
		{
			name:   "both starting, each seen behind by the other",
			active: map[string]int{"a": 10, "b": 10},
			seen: map[string][]jobs.LeaseInfo{
				"a": {lease("a", 8), lease("b", 8)},
				"b": {lease("a", 8), lease("b", 8)},
			},
			want: map[string]bool{"a": true, "b": true},
		},
		{
			name:   "each has run ahead of its last publication",
			active: map[string]int{"a": 120, "b": 118},
			seen: map[string][]jobs.LeaseInfo{
				"a": {lease("a", 100), lease("b", 101)},
				"b": {lease("a", 100), lease("b", 101)},
			},
			want: map[string]bool{"a": true, "b": false},
		},
		{
			name:   "a node that joined: the loaded one defers",
			active: map[string]int{"a": 100, "c": 0},
			seen: map[string][]jobs.LeaseInfo{
				"a": {lease("a", 100), lease("c", 0)},
				"c": {lease("a", 100), lease("c", 0)},
			},
			want: map[string]bool{"a": false, "c": true},
		},
		{
			name:   "own lease not seen yet: its count now",
			active: map[string]int{"a": 50},
			seen:   map[string][]jobs.LeaseInfo{"a": {lease("b", 10)}},
			want:   map[string]bool{"a": false},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			anyTakes := false
			for node, want := range c.want {
				got := mayTakeSeen(node, c.active[node], c.seen[node])
				if got != want {
					t.Errorf("node %s: mayTakeSeen = %v, want %v", node, got, want)
				}
				anyTakes = anyTakes || got
			}
			if len(c.want) > 1 && !anyTakes {
				t.Errorf("every node defers to the others: none takes a job")
			}
		})
	}
}

// TestTakeBoundSeen: two nodes starting jobs at once, each ahead of its
// last publication, may each take a full batch; compared with its count
// now, each was bound to one job per transaction. A node the look shows
// ahead of a peer with room is still bound to its share.
func TestTakeBoundSeen(t *testing.T) {
	lease := func(id string, running int) jobs.LeaseInfo {
		return jobs.LeaseInfo{ID: id, Running: running, Capacity: 1000}
	}
	cases := []struct {
		name   string
		self   string
		active int
		seen   []jobs.LeaseInfo
		want   int
	}{
		{"both starting, published even", "a", 130, []jobs.LeaseInfo{lease("a", 100), lease("b", 100)}, math.MaxInt},
		{"ahead in the look: bound to its share", "a", 130, []jobs.LeaseInfo{lease("a", 120), lease("b", 80)}, 1},
		{"behind in the look", "b", 90, []jobs.LeaseInfo{lease("a", 120), lease("b", 80)}, math.MaxInt},
		{"own lease not seen yet: its count now", "a", 50, []jobs.LeaseInfo{lease("b", 10)}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := takeBoundSeen(c.self, c.active, c.seen); got != c.want {
				t.Errorf("takeBoundSeen = %d, want %d", got, c.want)
			}
		})
	}
}
