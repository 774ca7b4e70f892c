package host

import (
	"testing"

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
