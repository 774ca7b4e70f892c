package host

import (
	"testing"
	"time"

	pb "github.com/couchepi/couchepi/internal/hookspb"
)

// TestEventQueueCoalescesDBUpdated: a db_updated event replaces the one
// at the tail of its db's queue, never one behind another event, so
// per-db order holds and a db costs one queued event however many writes.
func TestEventQueueCoalescesDBUpdated(t *testing.T) {
	upd := func(db, seq string) *pb.Event { return &pb.Event{Hook: dbUpdated, Db: db, Seq: seq} }
	write := func(db, seq string) *pb.Event { return &pb.Event{Hook: "after_doc_write", Db: db, Seq: seq} }
	tests := []struct {
		name string
		push []*pb.Event
		want []string // hook:db:seq in delivery order
	}{
		{"many updates, one event", []*pb.Event{upd("a", "1"), upd("a", "2"), upd("a", "3")},
			[]string{"db_updated:a:3"}},
		{"dbs kept apart", []*pb.Event{upd("a", "1"), upd("b", "1"), upd("a", "2")},
			[]string{"db_updated:a:2", "db_updated:b:1"}},
		{"never across another event", []*pb.Event{upd("a", "1"), write("a", "2"), upd("a", "2"), upd("a", "3")},
			[]string{"db_updated:a:1", "after_doc_write:a:2", "db_updated:a:3"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := newEventQueue(100)
			for _, ev := range tc.push {
				q.push(ev)
			}
			var got []string
			for _, ev := range q.take(100) {
				got = append(got, ev.GetHook()+":"+ev.GetDb()+":"+ev.GetSeq())
			}
			if len(got) != len(tc.want) {
				t.Fatalf("delivered %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("delivered %v, want %v", got, tc.want)
				}
			}
			if _, _, waiting := q.counts(); waiting != 0 {
				t.Errorf("%d events still counted as waiting", waiting)
			}
		})
	}
}

// TestEventQueueCatchUpOrder: while a db waits for a catch-up, its new
// events are dropped (the catch-up reads them), so none is delivered ahead
// of it; a catch-up put off after a failure is not taken before its time,
// and the other dbs' events are delivered meanwhile.
func TestEventQueueCatchUpOrder(t *testing.T) {
	write := func(db, seq string) *pb.Event { return &pb.Event{Hook: "after_doc_write", Db: db, Seq: seq} }
	now := time.Now()
	q := newEventQueue(100)
	q.push(write("a", "1"))
	q.markCatchUp("a")
	q.push(write("a", "2"))
	q.push(write("b", "1"))
	if got := q.takeCatchUps(now); len(got) != 1 || got[0] != "a" {
		t.Fatalf("catch-ups %v, want [a]", got)
	}
	// a's catch-up failed: put off; a's new events are not delivered.
	q.deferCatchUp("a", now.Add(time.Second))
	q.push(write("a", "3"))
	if got := q.takeCatchUps(now); len(got) != 0 {
		t.Fatalf("catch-ups %v before their time", got)
	}
	batch := q.take(100)
	if len(batch) != 1 || batch[0].GetDb() != "b" {
		t.Fatalf("delivered %v, want b's event only", batch)
	}
	if got := q.takeCatchUps(now.Add(time.Second)); len(got) != 1 || got[0] != "a" {
		t.Fatalf("catch-ups %v when due, want [a]", got)
	}
	if q.pending() {
		t.Error("pending after everything was taken")
	}
	if pushed, dropped, waiting := q.counts(); pushed != 4 || dropped != 3 || waiting != 0 {
		t.Errorf("pushed %d, dropped %d, waiting %d; want 4, 3, 0", pushed, dropped, waiting)
	}
}
