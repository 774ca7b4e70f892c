package jobserver

import (
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
