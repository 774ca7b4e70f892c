package sdk

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/couchepi/couchepi/hooks"
	pb "github.com/couchepi/couchepi/internal/hookspb"
)

// recorder is a plugin that records the events it handles and fails the
// events whose doc id is "fail".
type recorder struct {
	got []string
}

func (r *recorder) Info() hooks.PluginInfo                        { return hooks.PluginInfo{Name: "recorder"} }
func (r *recorder) Configure(context.Context, hooks.Config) error { return nil }
func (r *recorder) Start(context.Context, hooks.Services) error   { return nil }
func (r *recorder) Stop(context.Context) error                    { return nil }

func (r *recorder) AfterDocWrite(_ context.Context, ev hooks.DocWrite) error {
	if ev.DocID == "fail" {
		return errors.New("cannot handle")
	}
	r.got = append(r.got, ev.DB+"/"+ev.DocID)
	return nil
}

func (r *recorder) AfterDBCreate(_ context.Context, db, _ string) error {
	r.got = append(r.got, "+"+db)
	return nil
}

func (r *recorder) AfterDBDelete(_ context.Context, db, _ string) error {
	r.got = append(r.got, "-"+db)
	return nil
}

// TestDeliver: events are handled in order; after a failed event, the rest
// of that db's batch is skipped and the db is reported for catch-up.
func TestDeliver(t *testing.T) {
	ev := func(hook hooks.Hook, db, id string) *pb.Event {
		return &pb.Event{Hook: string(hook), Db: db, DocId: id}
	}
	cases := []struct {
		name      string
		events    []*pb.Event
		wantGot   []string
		wantCatch []string
	}{
		{"in order", []*pb.Event{ev(hooks.AfterDBCreate, "a", ""), ev(hooks.AfterDocWrite, "a", "1"), ev(hooks.AfterDocWrite, "b", "1"), ev(hooks.AfterDBDelete, "b", "")},
			[]string{"+a", "a/1", "b/1", "-b"}, nil},
		{"failure skips the rest of the db", []*pb.Event{ev(hooks.AfterDocWrite, "a", "1"), ev(hooks.AfterDocWrite, "a", "fail"), ev(hooks.AfterDocWrite, "b", "1"), ev(hooks.AfterDocWrite, "a", "2")},
			[]string{"a/1", "b/1"}, []string{"a"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := &recorder{}
			reply, err := newServer(p, nil, nil).Deliver(context.Background(), &pb.DeliverRequest{Events: c.events})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(p.got, c.wantGot) || !reflect.DeepEqual(reply.GetCatchUp(), c.wantCatch) {
				t.Errorf("handled %v, catch-up %v; want %v, %v", p.got, reply.GetCatchUp(), c.wantGot, c.wantCatch)
			}
		})
	}
}

// batchRecorder takes after_doc_write events in batches; it records each
// batch as "db:id,id" and fails a batch holding the doc id "fail".
type batchRecorder struct{ recorder }

func (r *batchRecorder) AfterDocWrites(_ context.Context, db string, evs []hooks.DocWrite) error {
	line := db + ":"
	for i, ev := range evs {
		if ev.DocID == "fail" {
			return errors.New("cannot handle")
		}
		if i > 0 {
			line += ","
		}
		line += ev.DocID
	}
	r.got = append(r.got, line)
	return nil
}

// TestDeliverBatches: a DocWriteBatcher gets each run of consecutive doc
// writes of one db as one call, in order, and no AfterDocWrite calls; a
// failed batch skips the rest of its db and asks for its catch-up.
func TestDeliverBatches(t *testing.T) {
	ev := func(hook hooks.Hook, db, id string) *pb.Event {
		return &pb.Event{Hook: string(hook), Db: db, DocId: id}
	}
	w := func(db, id string) *pb.Event { return ev(hooks.AfterDocWrite, db, id) }
	cases := []struct {
		name      string
		events    []*pb.Event
		wantGot   []string
		wantCatch []string
	}{
		{"runs per db", []*pb.Event{w("a", "1"), w("a", "2"), w("b", "1"), w("a", "3")},
			[]string{"a:1,2", "b:1", "a:3"}, nil},
		{"db events split runs", []*pb.Event{ev(hooks.AfterDBCreate, "a", ""), w("a", "1"), ev(hooks.AfterDBDelete, "a", ""), w("a", "2"), w("a", "3")},
			[]string{"+a", "a:1", "-a", "a:2,3"}, nil},
		{"failed batch skips its db", []*pb.Event{w("a", "1"), w("a", "fail"), w("b", "1"), w("a", "2")},
			[]string{"b:1"}, []string{"a"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := &batchRecorder{}
			reply, err := newServer(p, nil, nil).Deliver(context.Background(), &pb.DeliverRequest{Events: c.events})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(p.got, c.wantGot) || !reflect.DeepEqual(reply.GetCatchUp(), c.wantCatch) {
				t.Errorf("handled %v, catch-up %v; want %v, %v", p.got, reply.GetCatchUp(), c.wantGot, c.wantCatch)
			}
		})
	}
}

// TestSubscribedHooksImplemented: a plugin subscribing to a hook it does
// not implement is refused at GetInfo, with the reason.
func TestSubscribedHooksImplemented(t *testing.T) {
	sub := func(h hooks.Hook) hooks.PluginInfo {
		return hooks.PluginInfo{Name: "recorder", Subscriptions: []hooks.Subscription{{Hook: h, DB: "*"}}}
	}
	tests := []struct {
		hook hooks.Hook
		want string // "" = accepted
	}{
		{hooks.AfterDocWrite, ""},
		{hooks.AfterDBCreate, ""},
		{hooks.AfterDBDelete, ""},
		{hooks.BeforeDocUpdate, "plugin recorder subscribes to before_doc_update but does not implement sdk.BeforeDocUpdater"},
		{hooks.AfterDocRead, "plugin recorder subscribes to after_doc_read but does not implement sdk.AfterDocReader"},
	}
	for _, tc := range tests {
		err := checkImplements(&recorder{}, sub(tc.hook))
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("%s: %q, want %q", tc.hook, got, tc.want)
		}
	}
}
