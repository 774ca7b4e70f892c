package jobs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
)

// prefixTag tags a job with its id up to the first "|", as the replicator
// tags jobs with their replicator db.
func prefixTag(_, id string, _ []byte) string {
	tag, _, _ := strings.Cut(id, "|")
	return tag
}

// addMany adds ids (data = id) in one transaction.
func addMany(t *testing.T, q *Queue, ids []string, stime time.Time) {
	t.Helper()
	err := q.Transact(context.Background(), func(tx *Tx) error {
		for _, id := range ids {
			if err := tx.Add(typ, id, []byte(id), stime); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func seq(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s|%05d", prefix, i)
	}
	return ids
}

// pickTag chooses the first candidate of tag, else the first one.
func pickTag(tag string, seen *[]Candidate) func([]Candidate) int {
	return func(c []Candidate) int {
		*seen = append((*seen)[:0], c...)
		for i := range c {
			if c[i].Tag == tag {
				return i
			}
		}
		return 0
	}
}

func TestChooseSeesEveryTag(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		q := newQueue(t, s, Options{Tag: prefixTag})
		ctx := context.Background()
		// "a" sorts first and has more due jobs than one scan reads.
		addMany(t, q, seq("a", 2*pickBatch), time.Time{})
		addMany(t, q, seq("b", 3), time.Time{})
		addMany(t, q, seq("c", 2), time.Now().Add(time.Hour)) // not due
		// One due job of each tag is offered (which one among a tag's
		// always-due jobs is not part of the contract: a big queue picks
		// it from a window, see window.go).
		var seen []Candidate
		took := map[string]bool{}
		for i := 0; i < 3; i++ {
			j, err := q.Accept(ctx, typ, AcceptOptions{NoWait: true, Choose: pickTag("b", &seen)})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(j.ID, "b|") || took[j.ID] {
				t.Fatalf("accept %d: got %s, want another job of b (candidates %+v)", i, j.ID, seen)
			}
			took[j.ID] = true
			if len(seen) != 2 || seen[0].Tag != "a" || !strings.HasPrefix(seen[0].ID, "a|") || seen[1].Tag != "b" {
				t.Fatalf("accept %d: candidates %+v, want one of a and one of b", i, seen)
			}
		}
		j, err := q.Accept(ctx, typ, AcceptOptions{NoWait: true, Choose: pickTag("b", &seen)})
		if err != nil || !strings.HasPrefix(j.ID, "a|") || len(seen) != 1 {
			t.Fatalf("once b is drained: got %v %v, candidates %+v", j, err, seen)
		}
	})
}

func TestChooseWithoutTag(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		q := newQueue(t, s, Options{})
		addMany(t, q, seq("a", 2*pickBatch), time.Time{})
		addMany(t, q, seq("b", 1), time.Time{})
		var seen []Candidate
		last := func(c []Candidate) int {
			seen = append(seen[:0], c...)
			return len(c) - 1
		}
		j, err := q.Accept(context.Background(), typ, AcceptOptions{NoWait: true, Choose: last})
		if err != nil {
			t.Fatal(err)
		}
		// Without an index only the first pickBatch due jobs are offered.
		want := fmt.Sprintf("a|%05d", pickBatch-1)
		if len(seen) != pickBatch || j.ID != want || seen[0].Tag != "" {
			t.Fatalf("got %s from %d candidates (first %+v), want %s from %d", j.ID, len(seen), seen[0], want, pickBatch)
		}
		// An out-of-range answer takes the first candidate.
		j, err = q.Accept(context.Background(), typ, AcceptOptions{NoWait: true, Choose: func([]Candidate) int { return -1 }})
		if err != nil || j.ID != "a|00000" {
			t.Fatalf("out of range choice: got %v %v, want a|00000", j, err)
		}
	})
}

// TestChooseConcurrent: acceptors that all choose the same kind of
// candidate still take every job exactly once.
func TestChooseConcurrent(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		q := newQueue(t, s, Options{Tag: prefixTag})
		var ids []string
		for _, tag := range []string{"a", "b", "c"} {
			ids = append(ids, seq(tag, 60)...)
		}
		addMany(t, q, ids, time.Time{})
		var mu sync.Mutex
		got := map[string]int{}
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				last := func(c []Candidate) int { return len(c) - 1 }
				for {
					j, err := q.Accept(context.Background(), typ, AcceptOptions{NoWait: true, Choose: last})
					if errors.Is(err, ErrNotFound) {
						return
					}
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					got[j.ID]++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if len(got) != len(ids) {
			t.Fatalf("accepted %d distinct jobs, want %d", len(got), len(ids))
		}
		for id, n := range got {
			if n != 1 {
				t.Fatalf("%s accepted %d times", id, n)
			}
		}
	})
}

// TestIndexPending: jobs enqueued by a queue without Tag are indexed by
// IndexPending, and the ones it did not index still run after the others.
func TestIndexPending(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		ctx := context.Background()
		plain := newQueue(t, s, Options{})
		tagged := newQueue(t, s, Options{Tag: prefixTag})
		addMany(t, plain, []string{"x|1", "x|2", "y|1"}, time.Time{})
		for _, want := range []int{3, 0} {
			n, err := tagged.IndexPending(ctx, typ)
			if err != nil || n != want {
				t.Fatalf("IndexPending: %d %v, want %d", n, err, want)
			}
		}
		addMany(t, plain, []string{"z|1"}, time.Time{})
		// A taggerless remove also drops the index entry.
		if err := plain.Remove(ctx, typ, "x|1"); err != nil {
			t.Fatal(err)
		}
		var seen []Candidate
		var order []string
		for {
			j, err := tagged.Accept(ctx, typ, AcceptOptions{NoWait: true, Choose: pickTag("y", &seen)})
			if errors.Is(err, ErrNotFound) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			order = append(order, j.ID+"/"+seen[0].Tag)
		}
		if got, want := strings.Join(order, " "), "y|1/x x|2/x z|1/"; got != want {
			t.Fatalf("accepted %q, want %q", got, want)
		}
	})
}

// TestTagFollowsData: a pending job re-added with data of another tag moves
// to that tag.
func TestTagFollowsData(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		ctx := context.Background()
		q := newQueue(t, s, Options{Tag: func(_, _ string, data []byte) string { return string(data) }})
		mustAdd(t, q, "j1", "old", time.Time{})
		mustAdd(t, q, "j1", "new", time.Time{})
		var seen []Candidate
		j, err := q.Accept(ctx, typ, AcceptOptions{NoWait: true, Choose: pickTag("new", &seen)})
		if err != nil || j.ID != "j1" || len(seen) != 1 || seen[0].Tag != "new" {
			t.Fatalf("got %v %v, candidates %+v; want j1 under tag new only", j, err, seen)
		}
		// Resubmitted with new data, it is indexed under the new tag.
		if err := q.Resubmit(ctx, j, time.Time{}, []byte("newer")); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Accept(ctx, typ, AcceptOptions{NoWait: true, Choose: pickTag("", &seen)}); err != nil || len(seen) != 1 || seen[0].Tag != "newer" {
			t.Fatalf("after resubmit: %v, candidates %+v", err, seen)
		}
	})
}
