package jobs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
)

func TestAddNeedsTypeTimeout(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		q := newQueue(t, s, Options{})
		ctx := context.Background()
		if err := q.Add(ctx, "other", "j", nil, time.Time{}); !errors.Is(err, ErrNoTypeTimeout) {
			t.Fatalf("got %v, want ErrNoTypeTimeout", err)
		}
		if d, err := q.GetTypeTimeout(ctx, typ); err != nil || d != time.Minute {
			t.Fatalf("GetTypeTimeout: %v %v", d, err)
		}
		if err := q.ClearTypeTimeout(ctx, typ); err != nil {
			t.Fatal(err)
		}
		if err := q.Add(ctx, typ, "j", nil, time.Time{}); !errors.Is(err, ErrNoTypeTimeout) {
			t.Fatalf("after clear: got %v, want ErrNoTypeTimeout", err)
		}
	})
}

func TestLifecycle(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		q := newQueue(t, s, Options{})
		ctx := context.Background()
		mustAdd(t, q, "j1", "d1", time.Time{})
		wantState(t, q, "j1", Pending)
		j := mustAccept(t, q)
		if j.ID != "j1" || string(j.Data) != "d1" || j.Resubmit {
			t.Fatalf("accepted %+v", j)
		}
		wantState(t, q, "j1", Running)
		if err := q.Update(ctx, j, []byte("d2")); err != nil {
			t.Fatal(err)
		}
		wantData(t, q, "j1", "d2")
		if err := q.Update(ctx, j, nil); err != nil {
			t.Fatal(err)
		}
		wantData(t, q, "j1", "d2")
		if err := q.Finish(ctx, j, []byte("done")); err != nil {
			t.Fatal(err)
		}
		wantState(t, q, "j1", Finished)
		wantData(t, q, "j1", "done")
		if err := q.Update(ctx, j, nil); !errors.Is(err, ErrHalt) {
			t.Fatalf("update after finish: got %v, want ErrHalt", err)
		}
		if err := q.Finish(ctx, j, nil); !errors.Is(err, ErrHalt) {
			t.Fatalf("finish twice: got %v, want ErrHalt", err)
		}
		if _, err := q.Accept(ctx, typ, AcceptOptions{NoWait: true}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("accept with nothing pending: got %v, want ErrNotFound", err)
		}
		if _, err := q.GetData(ctx, typ, "nope"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("GetData missing: %v", err)
		}
	})
}

func TestReAdd(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		q := newQueue(t, s, Options{})
		ctx := context.Background()
		past := time.Now().Add(-time.Hour)
		future := time.Now().Add(time.Hour)

		// pending: stime and data replaced
		mustAdd(t, q, "p", "a", past)
		mustAdd(t, q, "p", "b", future)
		wantData(t, q, "p", "b")
		if n, _ := q.PendingCount(ctx, typ, time.Time{}, 0); n != 0 {
			t.Fatalf("pending re-add did not move stime: %d due", n)
		}
		mustAdd(t, q, "p", "c", past)
		if n, _ := q.PendingCount(ctx, typ, time.Time{}, 0); n != 1 {
			t.Fatalf("due after moving back: %d", n)
		}
		mustAdd(t, q, "p", "d", past) // same stime, new data
		wantData(t, q, "p", "d")

		// running: flagged resubmit, data unchanged; Finish re-enqueues
		j := mustAccept(t, q)
		mustAdd(t, q, "p", "new", past)
		wantState(t, q, "p", Running)
		wantData(t, q, "p", "d")
		if err := q.Update(ctx, j, nil); err != nil || !j.Resubmit {
			t.Fatalf("update: %v resubmit=%v, want flag", err, j.Resubmit)
		}
		if err := q.Finish(ctx, j, []byte("fin")); err != nil {
			t.Fatal(err)
		}
		wantState(t, q, "p", Pending)
		j = mustAccept(t, q)
		if j.Resubmit || string(j.Data) != "fin" {
			t.Fatalf("re-accepted %+v", j)
		}

		// finished: re-enqueued with new data
		if err := q.Finish(ctx, j, nil); err != nil {
			t.Fatal(err)
		}
		wantState(t, q, "p", Finished)
		mustAdd(t, q, "p", "again", time.Time{})
		wantState(t, q, "p", Pending)
		wantData(t, q, "p", "again")
	})
}

func TestRemove(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		q := newQueue(t, s, Options{})
		ctx := context.Background()
		if err := q.Remove(ctx, typ, "x"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("remove missing: %v", err)
		}
		mustAdd(t, q, "pending", "", time.Time{})
		if err := q.Remove(ctx, typ, "pending"); err != nil {
			t.Fatal(err)
		}
		wantState(t, q, "pending", NotFound)
		if _, err := q.Accept(ctx, typ, AcceptOptions{NoWait: true}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("removed job still in queue: %v", err)
		}

		mustAdd(t, q, "running", "", time.Time{})
		j := mustAccept(t, q)
		if err := q.Remove(ctx, typ, "running"); err != nil {
			t.Fatal(err)
		}
		if err := q.Update(ctx, j, nil); !errors.Is(err, ErrHalt) {
			t.Fatalf("runner of removed job: got %v, want ErrHalt", err)
		}
		// re-adding under the same id does not give the old runner the lock back
		mustAdd(t, q, "running", "", time.Time{})
		j2 := mustAccept(t, q)
		if err := q.Finish(ctx, j, nil); !errors.Is(err, ErrHalt) {
			t.Fatalf("old runner after re-add and accept-by-other: got %v, want ErrHalt", err)
		}
		if err := q.Finish(ctx, j2, nil); err != nil {
			t.Fatal(err)
		}
		if err := q.Remove(ctx, typ, "running"); err != nil {
			t.Fatalf("remove finished: %v", err)
		}
		wantState(t, q, "running", NotFound)
	})
}

func TestResubmit(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		q := newQueue(t, s, Options{})
		ctx := context.Background()
		mustAdd(t, q, "r", "a", time.Time{})
		j := mustAccept(t, q)
		at := time.Now().Add(time.Hour)
		if err := q.Resubmit(ctx, j, at, []byte("b")); err != nil {
			t.Fatal(err)
		}
		wantState(t, q, "r", Pending)
		wantData(t, q, "r", "b")
		if err := q.Update(ctx, j, nil); !errors.Is(err, ErrHalt) {
			t.Fatalf("after resubmit the runner must be released: %v", err)
		}
		if _, err := q.Accept(ctx, typ, AcceptOptions{NoWait: true}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("job resubmitted in the future was accepted now: %v", err)
		}
		j, err := q.Accept(ctx, typ, AcceptOptions{MaxSchedTime: at, NoWait: true})
		if err != nil || j.ID != "r" {
			t.Fatalf("accept with MaxSchedTime at stime: %v %v", j, err)
		}
	})
}

func TestAcceptWaits(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		q := newQueue(t, s, Options{})
		ctx := context.Background()

		// blocked until ctx ends
		cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		_, err := q.Accept(cctx, typ, AcceptOptions{})
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want DeadlineExceeded", err)
		}

		// woken by an Add
		got := make(chan *Job, 1)
		go func() {
			j, err := q.Accept(ctx, typ, AcceptOptions{})
			if err != nil {
				t.Error(err)
			}
			got <- j
		}()
		time.Sleep(20 * time.Millisecond)
		mustAdd(t, q, "now", "", time.Time{})
		if j := <-got; j == nil || j.ID != "now" {
			t.Fatalf("woken accept got %+v", j)
		}

		// a future job is taken once due, not before
		due := time.Now().Add(300 * time.Millisecond)
		mustAdd(t, q, "later", "", due)
		j := mustAccept(t, q)
		if j.ID != "later" || time.Now().Before(due.Truncate(time.Millisecond)) {
			t.Fatalf("accepted %s before it was due", j.ID)
		}

		// Close unblocks
		go func() { time.Sleep(20 * time.Millisecond); q.Close() }()
		if _, err := q.Accept(ctx, typ, AcceptOptions{}); !errors.Is(err, ErrClosed) {
			t.Fatalf("accept on closed queue: %v", err)
		}
	})
}

func TestNoSchedule(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		q := newQueue(t, s, Options{})
		ctx := context.Background()
		mustAdd(t, q, "sched", "", time.Now().Add(-time.Minute))
		ids := map[string]bool{}
		for i := 0; i < 20; i++ {
			id := fmt.Sprintf("%032x", i*7919)
			ids[id] = true
			mustAdd(t, q, id, "", time.Time{})
		}
		for range 20 {
			j, err := q.Accept(ctx, typ, AcceptOptions{NoSchedule: true, NoWait: true})
			if err != nil {
				t.Fatal(err)
			}
			if !ids[j.ID] {
				t.Fatalf("NoSchedule accepted %q (not stime 0 or twice)", j.ID)
			}
			delete(ids, j.ID)
		}
		if _, err := q.Accept(ctx, typ, AcceptOptions{NoSchedule: true, NoWait: true}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("NoSchedule took a scheduled job: %v", err)
		}
	})
}

func TestConcurrentAccepts(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		q := newQueue(t, s, Options{})
		ctx := context.Background()
		const jobs, workers = 300, 12
		err := q.Transact(ctx, func(tx *Tx) error {
			for i := 0; i < jobs; i++ {
				if err := tx.Add(typ, fmt.Sprintf("j%04d", i), nil, time.Time{}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var got []string
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					j, err := q.Accept(ctx, typ, AcceptOptions{NoWait: true})
					if errors.Is(err, ErrNotFound) {
						return
					}
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					got = append(got, j.ID)
					mu.Unlock()
					if err := q.Finish(ctx, j, nil); err != nil {
						t.Error(err)
					}
				}
			}()
		}
		wg.Wait()
		sort.Strings(got)
		if len(got) != jobs {
			t.Fatalf("accepted %d jobs, want %d", len(got), jobs)
		}
		for i, id := range got {
			if id != fmt.Sprintf("j%04d", i) {
				t.Fatalf("job accepted twice or missing near %s", id)
			}
		}
	})
}

func TestLargeData(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		q := newQueue(t, s, Options{})
		ctx := context.Background()
		big := bytes.Repeat([]byte("0123456789abcdef"), 20000) // 320 KB: 4 chunks
		if err := q.Add(ctx, typ, "big", big, time.Time{}); err != nil {
			t.Fatal(err)
		}
		wantData(t, q, "big", string(big))
		j := mustAccept(t, q)
		if !bytes.Equal(j.Data, big) {
			t.Fatalf("accepted data: %d bytes", len(j.Data))
		}
		if err := q.Update(ctx, j, []byte("small")); err != nil {
			t.Fatal(err)
		}
		wantData(t, q, "big", "small")
		n := 0
		err := s.View(ctx, func(t kv.ReadTx) error {
			begin := q.l.chunks(typ, "big")
			return t.Range(begin, kv.PrefixEnd(begin), kv.RangeOptions{}, func(_, _ []byte) error { n++; return nil })
		})
		if err != nil || n != 0 {
			t.Fatalf("stale chunks after shrinking: %d %v", n, err)
		}
		tooBig := make([]byte, MaxDataSize+1)
		if err := q.Update(ctx, j, tooBig); !errors.Is(err, ErrDataTooLarge) {
			t.Fatalf("update too large: %v", err)
		}
		if err := q.Add(ctx, typ, "huge", tooBig, time.Time{}); !errors.Is(err, ErrDataTooLarge) {
			t.Fatalf("add too large: %v", err)
		}
		if err := q.Finish(ctx, j, big); err != nil {
			t.Fatal(err)
		}
		var folded []byte
		if err := q.Fold(ctx, typ, func(id string, st State, data []byte) error { folded = data; return nil }); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(folded, big) {
			t.Fatalf("fold data: %d bytes", len(folded))
		}
		if err := q.Remove(ctx, typ, "big"); err != nil {
			t.Fatal(err)
		}
		n = 0
		err = s.View(ctx, func(t kv.ReadTx) error {
			return t.Range(q.l.key(spaceChunk), kv.PrefixEnd(q.l.key(spaceChunk)), kv.RangeOptions{}, func(_, _ []byte) error { n++; return nil })
		})
		if err != nil || n != 0 {
			t.Fatalf("chunks left after remove: %d %v", n, err)
		}
	})
}

func TestFoldAndPendingCount(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		q := newQueue(t, s, Options{})
		ctx := context.Background()
		for i := 0; i < 1200; i++ {
			stime := time.Time{}
			if i%3 == 0 {
				stime = time.Now().Add(time.Hour)
			}
			mustAdd(t, q, fmt.Sprintf("j%04d", i), fmt.Sprint(i), stime)
		}
		j := mustAccept(t, q)
		if err := q.Finish(ctx, j, nil); err != nil {
			t.Fatal(err)
		}
		mustAccept(t, q)
		cases := []struct {
			max   time.Time
			limit int
			want  int
		}{
			{time.Time{}, 0, 798},
			{time.Time{}, 100, 100},
			{time.Now().Add(2 * time.Hour), 0, 1198},
			{time.Now().Add(2 * time.Hour), 1024, 1024},
		}
		for _, c := range cases {
			if n, err := q.PendingCount(ctx, typ, c.max, c.limit); err != nil || n != c.want {
				t.Errorf("PendingCount(%v, %d) = %d %v, want %d", c.max, c.limit, n, err, c.want)
			}
		}
		states := map[State]int{}
		prev := ""
		err := q.Fold(ctx, typ, func(id string, st State, data []byte) error {
			if id <= prev {
				return fmt.Errorf("fold out of order: %s after %s", id, prev)
			}
			prev = id
			var n int
			fmt.Sscanf(id, "j%04d", &n)
			if string(data) != fmt.Sprint(n) {
				return fmt.Errorf("data of %s: %q", id, data)
			}
			states[st]++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if states[Pending] != 1198 || states[Running] != 1 || states[Finished] != 1 {
			t.Fatalf("fold states: %v", states)
		}
		stop := errors.New("stop")
		if err := q.Fold(ctx, typ, func(string, State, []byte) error { return stop }); !errors.Is(err, stop) {
			t.Fatalf("fold error: %v", err)
		}
	})
}

func TestTransactKV(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		q := newQueue(t, s, Options{Prefix: []byte("jobs/")})
		ctx := context.Background()
		own := []byte("mine/rep-id")
		boom := errors.New("boom")
		err := q.Transact(ctx, func(tx *Tx) error {
			tx.KV().Set(own, []byte("job1"))
			if err := tx.Add(typ, "job1", nil, time.Time{}); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatal(err)
		}
		wantState(t, q, "job1", NotFound)
		err = q.Transact(ctx, func(tx *Tx) error {
			tx.KV().Set(own, []byte("job1"))
			return tx.Add(typ, "job1", nil, time.Time{})
		})
		if err != nil {
			t.Fatal(err)
		}
		wantState(t, q, "job1", Pending)
		err = s.View(ctx, func(t kv.ReadTx) error {
			v, err := t.Get(own)
			if string(v) != "job1" {
				return fmt.Errorf("own key: %q", v)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// TestNoScheduleWaitsForAdd checks a blocked NoSchedule accept ignores
// scheduled jobs becoming due and is woken by a stime-0 add.
func TestNoScheduleWaitsForAdd(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		q := newQueue(t, s, Options{})
		ctx := context.Background()
		mustAdd(t, q, "scheduled", "", time.Now().Add(50*time.Millisecond))
		got := make(chan *Job, 1)
		go func() {
			j, err := q.Accept(ctx, typ, AcceptOptions{NoSchedule: true})
			if err != nil {
				t.Error(err)
			}
			got <- j
		}()
		time.Sleep(150 * time.Millisecond)
		mustAdd(t, q, "unscheduled", "", time.Time{})
		if j := <-got; j == nil || j.ID != "unscheduled" {
			t.Fatalf("NoSchedule accept got %+v", j)
		}
		wantState(t, q, "scheduled", Pending)
	})
}

// TestFoldLargeJobs folds jobs whose data spans several byte-bounded batches.
func TestFoldLargeJobs(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		q := newQueue(t, s, Options{})
		ctx := context.Background()
		const n = 20
		for i := 0; i < n; i++ {
			data := bytes.Repeat([]byte{byte('a' + i)}, 300*1024)
			if err := q.Add(ctx, typ, fmt.Sprintf("j%02d", i), data, time.Time{}); err != nil {
				t.Fatal(err)
			}
		}
		i := 0
		err := q.Fold(ctx, typ, func(id string, st State, data []byte) error {
			if id != fmt.Sprintf("j%02d", i) || len(data) != 300*1024 || data[0] != byte('a'+i) {
				return fmt.Errorf("fold item %d: %s, %d bytes", i, id, len(data))
			}
			i++
			return nil
		})
		if err != nil || i != n {
			t.Fatalf("fold: %v after %d of %d", err, i, n)
		}
	})
}

// TestSetData: SetData replaces a job's data in any state and changes
// nothing else: a pending job keeps its place (and is tagged from the new
// data), a running job its runner, a finished job stays finished.
func TestSetData(t *testing.T) {
	dataTag := func(_, _ string, data []byte) string { tag, _, _ := bytes.Cut(data, []byte(":")); return string(tag) }
	backends(t, func(t *testing.T, s kv.Store) {
		q := newQueue(t, s, Options{Tag: dataTag})
		ctx := context.Background()
		big := "b:" + string(bytes.Repeat([]byte("x"), 2*ChunkSize))
		mustAdd(t, q, "run", "a:1", time.Time{})
		j := mustAccept(t, q)
		mustAdd(t, q, "done", "a:2", time.Time{})
		d := mustAccept(t, q)
		if err := q.Finish(ctx, d, nil); err != nil {
			t.Fatal(err)
		}
		at := time.Now().Add(-time.Hour)
		mustAdd(t, q, "wait", big, at) // chunked, then shrunk
		for _, tc := range []struct {
			id, data string
			state    State
		}{
			{"run", "a:run2", Running},
			{"done", "a:done2", Finished},
			{"wait", "c:wait2", Pending},
		} {
			if err := q.Transact(ctx, func(tx *Tx) error { return tx.SetData(typ, tc.id, []byte(tc.data)) }); err != nil {
				t.Fatalf("SetData %s: %v", tc.id, err)
			}
			wantState(t, q, tc.id, tc.state)
			wantData(t, q, tc.id, tc.data)
		}
		if err := q.Transact(ctx, func(tx *Tx) error { return tx.SetData(typ, "nope", []byte("x")) }); !errors.Is(err, ErrNotFound) {
			t.Fatalf("SetData of a missing job: %v, want ErrNotFound", err)
		}
		// The runner still holds its job.
		if err := q.Update(ctx, j, nil); err != nil {
			t.Fatalf("runner's Update after SetData: %v", err)
		}
		// The pending job kept its time and is offered under its new tag only.
		var seen []Candidate
		w, err := q.Accept(ctx, typ, AcceptOptions{NoWait: true, Choose: pickTag("c", &seen)})
		if err != nil || w.ID != "wait" || string(w.Data) != "c:wait2" {
			t.Fatalf("accept: %v %+v", err, w)
		}
		if len(seen) != 1 || seen[0].Tag != "c" || !seen[0].STime.Equal(at.Truncate(time.Millisecond)) {
			t.Fatalf("candidates %+v, want the job once, tag c, due at %v", seen, at)
		}
	})
}
