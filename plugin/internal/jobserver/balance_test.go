package jobserver

import (
	"fmt"
	"math"
	"testing"

	"github.com/couchepi/couchepi/plugin/jobs"
)

// simNode is a replication node of the spread simulation.
type simNode struct{ running, capacity int }

// leasesOf is what node i sees of the others (their published loads).
func leasesOf(nodes []simNode) []jobs.LeaseInfo {
	ls := make([]jobs.LeaseInfo, len(nodes))
	for i, n := range nodes {
		ls[i] = jobs.LeaseInfo{ID: fmt.Sprint(i), Running: n.running, Capacity: n.capacity}
	}
	return ls
}

// simInterval is one scheduling interval of every node: each hands on its
// excess (handOn, from the loads published at the interval's start), then
// the nodes take the pending jobs by turns, as many per accept as
// TakeBound and jobs.MaxAcceptBatch allow, a node that may not take
// (MayTake) waiting while another may. It returns the jobs still pending.
func simInterval(nodes []simNode, pending int) int {
	seen := leasesOf(nodes)
	for i := range nodes {
		n := handOn(fmt.Sprint(i), nodes[i].running, 0, seen)
		nodes[i].running -= n
		pending += n
	}
	for pending > 0 {
		took := 0
		anyMay := false
		for i := range nodes {
			if nodes[i].running < nodes[i].capacity && MayTake(fmt.Sprint(i), nodes[i].running, leasesOf(nodes)) {
				anyMay = true
			}
		}
		for i := range nodes {
			self := fmt.Sprint(i)
			ls := leasesOf(nodes)
			if anyMay && !MayTake(self, nodes[i].running, ls) {
				continue // defers to less loaded nodes (awaitBalance)
			}
			n := min(pending, jobs.MaxAcceptBatch, TakeBound(self, nodes[i].running, ls), nodes[i].capacity-nodes[i].running)
			if n <= 0 {
				continue
			}
			nodes[i].running += n
			pending -= n
			took += n
		}
		if took == 0 {
			break
		}
	}
	return pending
}

// TestSpread: running jobs spread within ±10 % across the replication
// nodes, and a node that joins gets its share within two scheduling
// intervals, however many jobs run (handing jobs on is not bounded by
// max_churn).
func TestSpread(t *testing.T) {
	const capacity = 20000
	for _, tc := range []struct {
		name    string
		running []int // per node before; 0 for one that joins
		pending int
	}{
		{"3 nodes start 10,000", []int{0, 0, 0}, 10000},
		{"one joins two running 10,000", []int{5000, 5000, 0}, 0},
		{"two join one running 10,000", []int{10000, 0, 0}, 0},
		{"one comes back, uneven", []int{6000, 4000, 0}, 0},
		{"even already", []int{3334, 3333, 3333}, 0},
		{"small", []int{40, 0, 0}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := make([]simNode, len(tc.running))
			total := tc.pending
			for i, r := range tc.running {
				nodes[i] = simNode{r, capacity}
				total += r
			}
			moved := 0
			pending := tc.pending
			for interval := 0; interval < 2; interval++ {
				before := 0
				for _, n := range nodes {
					before += n.running
				}
				pending = simInterval(nodes, pending)
				after := 0
				for _, n := range nodes {
					after += n.running
				}
				moved += max(before-after+tc.pending, 0)
			}
			if pending != 0 {
				t.Fatalf("%d jobs left pending", pending)
			}
			share := float64(total) / float64(len(nodes))
			for i, n := range nodes {
				if math.Abs(float64(n.running)-share) > 0.1*share+1 {
					t.Fatalf("node %d runs %d after two intervals, share %.0f (all: %v)", i, n.running, share, nodes)
				}
			}
			if tc.name == "even already" && moved != 0 {
				t.Fatalf("moved %d jobs between even nodes", moved)
			}
		})
	}
}
