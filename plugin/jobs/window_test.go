package jobs

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
	"github.com/couchepi/couchepi/plugin/kv/etcd"
	"github.com/couchepi/couchepi/plugin/kv/etcd/etcdtest"
)

// TestAcceptFromWindows: a queue big enough to pick from windows of the id
// space still hands out every job exactly once, whatever its ids look
// like, and stops using windows where they cannot find its jobs.
func TestAcceptFromWindows(t *testing.T) {
	n := pickBatch * 3
	cases := []struct {
		name     string
		id       func(i int) string
		wantMode windowMode // after the first accept
	}{
		{"replication ids", benchID, windowsUsed},
		{"sequential hex", func(i int) string { return fmt.Sprintf("%032x", i) }, windowsUseless},
		{"not hex", func(i int) string { return fmt.Sprintf("job-%06d", i) }, windowsUseless},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			s := kv.NewMemory()
			defer s.Close()
			q, err := New(s, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			if err := q.SetTypeTimeout(ctx, typ, time.Minute); err != nil {
				t.Fatal(err)
			}
			err = q.Transact(ctx, func(tx *Tx) error {
				for i := 0; i < n; i++ {
					if err := tx.Add(typ, c.id(i), []byte("{}"), time.Time{}); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]bool{}
			for i := 0; i < n; i++ {
				j, err := q.Accept(ctx, typ, AcceptOptions{NoWait: true})
				if err != nil {
					t.Fatalf("accept %d: %v", i, err)
				}
				if got[j.ID] {
					t.Fatalf("%s accepted twice", j.ID)
				}
				got[j.ID] = true
				// Windows are tried from the second accept on, and given
				// up on at once when they find nothing.
				if i == 1 {
					if m := q.windows.get(typ); m != c.wantMode {
						t.Errorf("window mode after two accepts = %d, want %d", m, c.wantMode)
					}
				}
			}
			if _, err := q.Accept(ctx, typ, AcceptOptions{NoWait: true}); !errors.Is(err, ErrNotFound) {
				t.Fatalf("accept on an empty queue: %v", err)
			}
			if q.windows.get(typ) == windowsUsed {
				t.Errorf("an emptied queue still picks from windows")
			}
		})
	}
}

// TestChooseFromWindows: in a big tagged queue, Choose is still offered
// every tag, small ones and ones added after the tags were listed (within
// tagsTTL), and every job is accepted exactly once.
// On etcd the picks of all tags are read in one request
// (kv.BatchSnapshotTx).
func TestChooseFromWindows(t *testing.T) {
	for _, c := range []struct {
		name  string
		drain int // jobs accepted in all: every one on memory
		open  func(t *testing.T) kv.Store
	}{
		{"memory", 3*pickBatch + 6, func(*testing.T) kv.Store { return kv.NewMemory() }},
		{"etcd", 100, func(t *testing.T) kv.Store {
			c := etcdtest.StartCluster(t, 1)
			s, err := etcd.Open(context.Background(), etcd.Config{Endpoints: c.Endpoints()})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := c.open(t)
			defer s.Close()
			testChooseFromWindows(t, s, c.drain)
		})
	}
}

func testChooseFromWindows(t *testing.T, s kv.Store, drain int) {
	ctx := context.Background()
	clock := newTestClock()
	q := newQueue(t, s, Options{Now: clock.Now, Tag: func(_, _ string, data []byte) string { return string(data) }})
	add := func(tag string, from, n int) {
		for ; n > 0; from, n = from+256, n-256 {
			err := q.Transact(ctx, func(tx *Tx) error {
				for i := from; i < from+min(n, 256); i++ {
					if err := tx.Add(typ, benchID(i), []byte(tag), time.Time{}); err != nil {
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
	add("big", 0, 3*pickBatch)
	add("small", 3*pickBatch, 5)
	got := map[string]string{}
	accept := func(prefer string) string {
		t.Helper()
		var seen []Candidate
		j, err := q.Accept(ctx, typ, AcceptOptions{NoWait: true, Choose: pickTag(prefer, &seen)})
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := got[j.ID]; dup {
			t.Fatalf("%s accepted twice", j.ID)
		}
		got[j.ID] = string(j.Data)
		return string(j.Data)
	}
	for i := 0; i < 5; i++ {
		if tag := accept("small"); tag != "small" {
			t.Fatalf("accept %d took a job of %q while small ones were due", i, tag)
		}
	}
	if tags, _ := q.windows.listedTags(typ, clock.Now()); tags == nil {
		t.Fatal("a big tagged queue does not remember its tags")
	}
	add("late", 3*pickBatch+5, 1)
	if tag := accept("late"); tag != "big" {
		t.Fatalf("a tag added after the listing was offered before tagsTTL: took %q", tag)
	}
	// Past tagsTTL an accept still uses the old list and has it read
	// again in the background.
	clock.advance(tagsTTL)
	for i := 0; ; i++ {
		if accept("late") == "late" {
			break
		}
		if i == 100 {
			t.Fatal("a tag added after the listing was not offered after tagsTTL")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for len(got) < drain {
		accept("big")
	}
	if drain < 3*pickBatch+6 {
		return
	}
	if _, err := q.Accept(ctx, typ, AcceptOptions{NoWait: true, Choose: func([]Candidate) int { return 0 }}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("accept on an empty queue: %v", err)
	}
}

// TestRelistTags: relisting from an old list finds tags that came up in
// every gap (before, between and after the listed ones) and drops listed
// tags that have no entries left.
func TestRelistTags(t *testing.T) {
	s := kv.NewMemory()
	defer s.Close()
	q := newQueue(t, s, Options{Tag: prefixTag})
	for _, tag := range []string{"a", "b", "c", "e"} {
		addMany(t, q, seq(tag, 3), time.Time{})
	}
	addMany(t, q, seq("f", 1), time.Now().Add(time.Hour)) // scheduled: listed too
	cases := []struct {
		old  []string
		want string
	}{
		{nil, "[a b c e f]"},
		{[]string{"b", "d"}, "[a b c e f]"},
		{[]string{"d"}, "[a b c e f]"},
		{[]string{"a", "b", "c", "e", "f"}, "[a b c e f]"},
		{[]string{"zz"}, "[a b c e f]"},
	}
	for _, c := range cases {
		var got []string
		err := s.View(context.Background(), func(tx kv.ReadTx) error {
			var err error
			got, err = q.relistTags(tx.Range, typ, c.old)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != c.want {
			t.Errorf("relist from %v: got %v, want %s", c.old, got, c.want)
		}
	}
}

// rangeCounter is a kv.Store counting the keys its transactions' ranges visit.
type rangeCounter struct {
	kv.Store
	keys atomic.Int64
}

func (s *rangeCounter) Update(ctx context.Context, fn func(kv.Tx) error) error {
	return s.Store.Update(ctx, func(tx kv.Tx) error { return fn(countingTx{tx, &s.keys}) })
}

type countingTx struct {
	kv.Tx
	keys *atomic.Int64
}

func (t countingTx) Range(begin, end []byte, opt kv.RangeOptions, fn func(k, v []byte) error) error {
	return t.Tx.Range(begin, end, opt, func(k, v []byte) error { t.keys.Add(1); return fn(k, v) })
}

// TestChooseNothingDue: in a big tagged queue of jobs scheduled later (as
// parked ones are), an accept that finds nothing due reads a few keys,
// not the tag index again; and a due job of a tag the listing has not
// seen is still taken at once.
func TestChooseNothingDue(t *testing.T) {
	ctx := context.Background()
	clock := newTestClock()
	s := &rangeCounter{Store: kv.NewMemory()}
	defer s.Close()
	q := newQueue(t, s, Options{Now: clock.Now, Tag: func(_, _ string, data []byte) string { return string(data) }})
	later := clock.Now().Add(time.Hour)
	for from := 0; from < 3*pickBatch; from += 256 {
		err := q.Transact(ctx, func(tx *Tx) error {
			for i := from; i < from+256; i++ {
				if err := tx.Add(typ, benchID(i), []byte("parked"), later); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	none := AcceptOptions{NoWait: true, Choose: func([]Candidate) int { return 0 }}
	if _, err := q.Accept(ctx, typ, none); !errors.Is(err, ErrNotFound) {
		t.Fatalf("first accept: %v, want ErrNotFound", err)
	}
	if tags, _ := q.windows.listedTags(typ, clock.Now()); tags == nil {
		t.Fatal("the big tagged queue's tags were not listed")
	}
	s.keys.Store(0)
	if _, err := q.Accept(ctx, typ, none); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second accept: %v, want ErrNotFound", err)
	}
	if n := s.keys.Load(); n > 16 {
		t.Errorf("an accept with nothing due read %d keys, want a few", n)
	}
	if err := q.Transact(ctx, func(tx *Tx) error { return tx.Add(typ, benchID(3*pickBatch), []byte("new"), time.Time{}) }); err != nil {
		t.Fatal(err)
	}
	j, err := q.Accept(ctx, typ, none)
	if err != nil || string(j.Data) != "new" {
		t.Fatalf("accept with a due job of an unlisted tag: %v, %v", j, err)
	}
}

// TestRelistTagsReadError: a failed read while relisting (the store down,
// the queue closing) is returned, not a panic of the refresh goroutine.
func TestRelistTagsReadError(t *testing.T) {
	s := kv.NewMemory()
	defer s.Close()
	q := newQueue(t, s, Options{Tag: prefixTag})
	addMany(t, q, seq("a", 3), time.Time{})
	boom := errors.New("store unavailable")
	err := s.View(context.Background(), func(tx kv.ReadTx) error {
		// The gaps' reads (one key each) pass; a listed tag's window fails.
		scan := func(begin, end []byte, opt kv.RangeOptions, fn func(k, v []byte) error) error {
			if opt.Limit == pickBatch {
				return boom
			}
			return tx.Range(begin, end, opt, fn)
		}
		_, err := q.relistTags(scan, typ, []string{"a"})
		return err
	})
	if !errors.Is(err, boom) {
		t.Fatalf("relist with a failing window read: %v, want %v", err, boom)
	}
}
