package jobs

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
)

var modelSeed = flag.Uint64("jobs.seed", 0, "seed of TestModel (0 = random)")
var modelOps = flag.Int("jobs.ops", 3000, "operations per TestModel run")

// mjob is the model's view of one job.
type mjob struct {
	state    State
	data     string
	stime    int64
	resubmit bool
	gen      int // unique per accept; a handle is valid only for its gen
}

type handle struct {
	j   *Job
	gen int
}

// TestModel runs random operations against the queue and a simple in-memory
// model of couch_jobs semantics and compares every result. Reproduce a
// failure with -jobs.seed=N.
func TestModel(t *testing.T) {
	seed := *modelSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (rerun with -jobs.seed=%d)", seed, seed)
	for _, tagged := range []bool{false, true} {
		t.Run(fmt.Sprintf("tagged=%v", tagged), func(t *testing.T) {
			backends(t, func(t *testing.T, s kv.Store) {
				runModel(t, s, seed, *modelOps, tagged)
			})
		})
	}
}

// modelTag is the tag of a job in the tagged model run: the last byte of
// its data, so re-adds and data updates move jobs between tags.
func modelTag(_, _ string, data []byte) string {
	if len(data) == 0 {
		return ""
	}
	return string(data[len(data)-1:])
}

// runModel checks the queue against the model. tagged runs it with
// Options.Tag and accepts through AcceptOptions.Choose, checking that the
// candidates are exactly the earliest due job of every tag.
func runModel(t *testing.T, s kv.Store, seed uint64, ops int, tagged bool) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	opts := Options{}
	if tagged {
		opts.Tag = modelTag
	}
	q := newQueue(t, s, opts)
	ctx := context.Background()
	now := time.Now()
	stimes := []time.Time{{}, now.Add(-time.Hour), now.Add(time.Hour)}
	ids := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	model := map[string]*mjob{}
	var handles []handle
	accepts := 0 // generation counter across all jobs and incarnations
	due := func() map[string]bool {
		out := map[string]bool{}
		for id, m := range model {
			if m.state == Pending && m.stime <= time.Now().UnixMilli() {
				out[id] = true
			}
		}
		return out
	}
	valid := func(h handle) bool {
		m := model[h.j.ID]
		return m != nil && m.state == Running && m.gen == h.gen
	}
	randData := func() []byte {
		if rng.IntN(3) == 0 {
			return nil
		}
		return []byte(fmt.Sprintf("d%d", rng.IntN(1000)))
	}
	check := func(step int, op string, err, want error) {
		t.Helper()
		if !errors.Is(err, want) || (want == nil && err != nil) {
			t.Fatalf("step %d %s: got error %v, want %v", step, op, err, want)
		}
	}
	for step := 0; step < ops; step++ {
		id := ids[rng.IntN(len(ids))]
		switch op := rng.IntN(9); op {
		case 0, 1: // add
			st := stimes[rng.IntN(len(stimes))]
			data := fmt.Sprintf("add%d", step)
			err := q.Add(ctx, typ, id, []byte(data), st)
			check(step, "add "+id, err, nil)
			m := model[id]
			switch {
			case m == nil || m.state == Finished:
				model[id] = &mjob{state: Pending, data: data, stime: ms(st)}
			case m.state == Pending:
				m.data, m.stime = data, ms(st)
			default:
				m.resubmit, m.stime = true, ms(st)
			}
		case 2: // remove
			err := q.Remove(ctx, typ, id)
			if model[id] == nil {
				check(step, "remove "+id, err, ErrNotFound)
			} else {
				check(step, "remove "+id, err, nil)
				delete(model, id)
			}
		case 3, 4: // accept
			want := due()
			aopt := AcceptOptions{NoWait: true}
			var chooseErr error
			if tagged {
				aopt.Choose = func(cands []Candidate) int {
					chooseErr = checkCandidates(model, want, cands)
					return rng.IntN(len(cands))
				}
			}
			j, err := q.Accept(ctx, typ, aopt)
			if chooseErr != nil {
				t.Fatalf("step %d accept: %v", step, chooseErr)
			}
			if len(want) == 0 {
				check(step, "accept", err, ErrNotFound)
				continue
			}
			check(step, "accept", err, nil)
			m := model[j.ID]
			if !want[j.ID] || string(j.Data) != m.data {
				t.Fatalf("step %d accept: got %s %q, due %v, model data %q", step, j.ID, j.Data, want, m.data)
			}
			m.state, m.resubmit = Running, false
			accepts++
			m.gen = accepts
			handles = append(handles, handle{j, m.gen})
		case 5, 6, 7: // update, finish, resubmit on a (possibly stale) handle
			if len(handles) == 0 {
				continue
			}
			h := handles[rng.IntN(len(handles))]
			data := randData()
			ok := valid(h)
			var err error
			var name string
			st := stimes[rng.IntN(len(stimes))]
			switch op {
			case 5:
				name = "update"
				err = q.Update(ctx, h.j, data)
			case 6:
				name = "finish"
				err = q.Finish(ctx, h.j, data)
			case 7:
				name = "resubmit"
				err = q.Resubmit(ctx, h.j, st, data)
			}
			name += " " + h.j.ID
			if !ok {
				check(step, name, err, ErrHalt)
				continue
			}
			check(step, name, err, nil)
			m := model[h.j.ID]
			if data != nil {
				m.data = string(data)
			}
			switch op {
			case 5:
				if h.j.Resubmit != m.resubmit {
					t.Fatalf("step %d %s: resubmit flag %v, model %v", step, name, h.j.Resubmit, m.resubmit)
				}
			case 6:
				if m.resubmit {
					m.state = Pending
				} else {
					m.state = Finished
				}
				m.resubmit = false
			case 7:
				m.state, m.stime, m.resubmit = Pending, ms(st), false
			}
		case 8: // reads
			st, err := q.GetState(ctx, typ, id)
			data, derr := q.GetData(ctx, typ, id)
			m := model[id]
			if m == nil {
				check(step, "get state "+id, err, ErrNotFound)
				check(step, "get data "+id, derr, ErrNotFound)
				continue
			}
			if err != nil || derr != nil || st != m.state || string(data) != m.data {
				t.Fatalf("step %d get %s: %s %q (%v %v), model %s %q", step, id, st, data, err, derr, m.state, m.data)
			}
			n, err := q.PendingCount(ctx, typ, time.Time{}, 0)
			if err != nil || n != len(due()) {
				t.Fatalf("step %d pending count: %d %v, model %d", step, n, err, len(due()))
			}
		}
	}
	seen := 0
	err := q.Fold(ctx, typ, func(id string, st State, data []byte) error {
		seen++
		m := model[id]
		if m == nil || m.state != st || m.data != string(data) {
			return fmt.Errorf("fold %s: %s %q, model %+v", id, st, data, m)
		}
		return nil
	})
	if err != nil || seen != len(model) {
		t.Fatalf("fold: %v; saw %d jobs, model has %d", err, seen, len(model))
	}
}

// checkCandidates checks that cands holds, for every tag of the due jobs,
// the due job of that tag with the earliest stime.
func checkCandidates(model map[string]*mjob, due map[string]bool, cands []Candidate) error {
	earliest := map[string]int64{}
	for id := range due {
		m := model[id]
		tag := modelTag("", id, []byte(m.data))
		if e, ok := earliest[tag]; !ok || m.stime < e {
			earliest[tag] = m.stime
		}
	}
	if len(cands) != len(earliest) {
		return fmt.Errorf("%d candidates %+v, want one for each of %d tags", len(cands), cands, len(earliest))
	}
	for _, c := range cands {
		m := model[c.ID]
		if !due[c.ID] {
			return fmt.Errorf("candidate %s is not due", c.ID)
		}
		if tag := modelTag("", c.ID, []byte(m.data)); c.Tag != tag || ms(c.STime) != m.stime || earliest[tag] != m.stime {
			return fmt.Errorf("candidate %+v: model tag %q stime %d, earliest of tag %d", c, tag, m.stime, earliest[tag])
		}
	}
	return nil
}
