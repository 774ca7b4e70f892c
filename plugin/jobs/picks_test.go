package jobs

import (
	"context"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
)

// TestCachedPicks: in a big tagged queue, the accepts after a window read
// take its other keys without reading ranges, until the cache is used up
// or older than picksTTL; a cached job another node took meanwhile, or
// whose entry is stale, is skipped (the stale index entry dropped), never
// taken twice.
func TestCachedPicks(t *testing.T) {
	ctx := context.Background()
	clock := newTestClock()
	s := &rangeCounter{Store: kv.NewMemory()}
	defer s.Close()
	opts := Options{Now: clock.Now, Tag: func(_, _ string, data []byte) string { return string(data) }}
	q := newQueue(t, s, opts)
	other := newQueue(t, s, opts) // another node on the same store
	for _, tag := range []string{"a", "b"} {
		// 6,144 jobs a tag: about 24 in a window of 1/256 of the ids.
		for from := 0; from < 6*pickBatch; from += 256 {
			err := q.Transact(ctx, func(tx *Tx) error {
				for i := from; i < from+256; i++ {
					if err := tx.Add(typ, benchID(i)+tag, []byte(tag), time.Time{}); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	got := map[string]bool{}
	accept := func(q *Queue) *Job {
		t.Helper()
		var seen []Candidate
		j, err := q.Accept(ctx, typ, AcceptOptions{NoWait: true, Choose: pickTag("a", &seen)})
		if err != nil {
			t.Fatal(err)
		}
		if got[j.ID] {
			t.Fatalf("%s accepted twice", j.ID)
		}
		if len(seen) != 2 {
			t.Fatalf("Choose was offered %d candidates, want one of each tag", len(seen))
		}
		got[j.ID] = true
		return j
	}
	accept(q) // lists the tags
	accept(q) // reads a window of each tag, keeps the rest
	cached := func() int {
		q.picks.mu.Lock()
		defer q.picks.mu.Unlock()
		if p := q.picks.m[pickSpace{typ, "a"}]; p != nil {
			return len(p.keys)
		}
		return 0
	}
	if cached() < 2 {
		t.Fatalf("%d picks of tag a cached after a window read, want several", cached())
	}

	s.keys.Store(0)
	for i := 0; cached() > 0; i++ {
		if i == picksKept {
			t.Fatalf("%d accepts did not use up the %d cached picks", i, picksKept)
		}
		accept(q)
	}
	if n := s.keys.Load(); n != 0 {
		t.Errorf("accepts from cached picks read %d keys of ranges, want 0", n)
	}

	// A cached job taken by another node, and one whose pending entry is
	// gone but whose tag index entry is left (stale), are skipped.
	accept(q) // reads a new window
	if cached() < 2 {
		t.Fatalf("%d picks cached, want at least 2", cached())
	}
	keyOf := func(i int) (tagKey []byte, id string) {
		q.picks.mu.Lock()
		defer q.picks.mu.Unlock()
		p := q.picks.m[pickSpace{typ, "a"}]
		k := p.keys[len(p.keys)-1-i] // next offers the last first
		_, _, id, err := taggedEntry(q.l.taggedType(typ), k)
		if err != nil {
			t.Fatal(err)
		}
		return k, id
	}
	_, taken := keyOf(0)
	staleKey, stale := keyOf(1)
	err := other.Transact(ctx, func(tx *Tx) error {
		if st, err := tx.GetState(typ, taken); err != nil || st != Pending {
			t.Fatalf("the cached job %s is %v (%v), want pending", taken, st, err)
		}
		return tx.Remove(typ, taken)
	})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Update(ctx, func(tx kv.Tx) error {
		tx.Clear(q.l.pending(typ, 0, stale))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	j := accept(q)
	if j.ID == taken || j.ID == stale {
		t.Fatalf("accepted %s, a job no longer pending", j.ID)
	}
	err = s.View(ctx, func(tx kv.ReadTx) error {
		v, err := tx.Get(staleKey)
		if v != nil {
			t.Errorf("the stale tag index entry of %s was left", stale)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	// Past picksTTL the cache is not used.
	for i := 0; cached() == 0; i++ {
		if i == 3 {
			t.Fatal("no picks cached after three window reads")
		}
		accept(q)
	}
	clock.advance(picksTTL)
	s.keys.Store(0)
	accept(q)
	if s.keys.Load() == 0 {
		t.Error("an accept past picksTTL read nothing: it took a pick cached too long ago")
	}
}
