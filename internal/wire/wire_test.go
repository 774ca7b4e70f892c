package wire

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/couchepi/couchepi/hooks"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestErrorRoundTrip(t *testing.T) {
	cases := []struct {
		in   error
		want *hooks.Error
		code codes.Code
	}{
		{hooks.Forbidden("x"), hooks.Forbidden("x"), codes.PermissionDenied},
		{fmt.Errorf("wrapped: %w", hooks.Conflict()), hooks.Conflict(), codes.Aborted},
		{&hooks.Error{Status: 503, Err: "service_unavailable", Reason: "down"}, &hooks.Error{Status: 503, Err: "service_unavailable", Reason: "down"}, codes.Unavailable},
		{errors.New("plain"), nil, codes.Internal},
		{context.DeadlineExceeded, nil, codes.DeadlineExceeded},
	}
	for _, c := range cases {
		st := ToStatus(c.in)
		if got := status.Code(st); got != c.code {
			t.Errorf("ToStatus(%v) code = %v, want %v", c.in, got, c.code)
		}
		got := FromStatus(st)
		if (got == nil) != (c.want == nil) || (got != nil && *got != *c.want) {
			t.Errorf("FromStatus(ToStatus(%v)) = %+v, want %+v", c.in, got, c.want)
		}
	}
	if ToStatus(nil) != nil || FromStatus(nil) != nil {
		t.Error("nil must stay nil")
	}
}

func TestConversions(t *testing.T) {
	info := hooks.PluginInfo{Name: "n", Version: "v", Subscriptions: []hooks.Subscription{{Hook: hooks.AfterDocWrite, DB: "*/_replicator"}},
		Routes: []hooks.Route{{Method: "GET", Path: "/_x/*"}}}
	back := InfoFromPB(InfoToPB(info))
	if back.Name != "n" || back.Subscriptions[0] != info.Subscriptions[0] || back.Routes[0] != info.Routes[0] {
		t.Errorf("info round trip: %+v", back)
	}
	cfg := hooks.Config{"a": {"k": "v"}}
	if got := ConfigFromPB(ConfigToPB(cfg)); got.Get("a", "k", "") != "v" {
		t.Errorf("config round trip: %v", got)
	}
	ev := hooks.DocWrite{DB: "d", DBUUID: "u", DocID: "i", Rev: "1-a", Seq: "3", Deleted: true, Doc: []byte("{}")}
	if got := DocWriteFromPB(DocWriteToPB(ev)); got.DB != ev.DB || got.Seq != ev.Seq || !got.Deleted || string(got.Doc) != "{}" {
		t.Errorf("doc write round trip: %+v", got)
	}
	page := hooks.ChangesPage{Results: []hooks.Change{{Seq: "1", ID: "a", Revs: []string{"1-x"}}}, LastSeq: "1", Pending: 2}
	if got := ChangesFromPB(ChangesToPB(page)); got.LastSeq != "1" || got.Pending != 2 || got.Results[0].Revs[0] != "1-x" {
		t.Errorf("changes round trip: %+v", got)
	}
	if u := UserCtxFromPB(nil); u.Name != "" || u.Roles == nil {
		t.Errorf("nil user = %+v", u)
	}
}
