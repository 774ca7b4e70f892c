package sdk

import (
	"context"
	"testing"

	"github.com/couchepi/couchepi/hooks"
	pb "github.com/couchepi/couchepi/internal/hookspb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// gate is a plugin whose before_doc_update rejects docs of db "locked" and
// whose after_doc_read answers "{}".
type gate struct{ *recorder }

func (gate) BeforeDocUpdate(_ context.Context, db string, doc []byte, _ hooks.UserCtx) ([]byte, error) {
	if db == "locked" {
		return nil, hooks.Forbidden("locked")
	}
	return doc, nil
}

func (gate) AfterDocRead(context.Context, string, []byte, hooks.UserCtx) ([]byte, error) {
	return []byte(`{}`), nil
}

// TestDocHookCall: a call on a DocHooks stream answers as the unary RPC
// does; a rejection travels in the result, everything else as a status.
func TestDocHookCall(t *testing.T) {
	doc := []byte(`{"_id":"a"}`)
	cases := []struct {
		name     string
		hook     string
		db       string
		stopped  bool
		wantDoc  string
		wantErr  *pb.CouchError
		wantCode codes.Code
	}{
		{"accepted", string(hooks.BeforeDocUpdate), "open", false, `{"_id":"a"}`, nil, codes.OK},
		{"rejected", string(hooks.BeforeDocUpdate), "locked", false, "", &pb.CouchError{Status: 403, Error: "forbidden", Reason: "locked"}, codes.OK},
		{"read", string(hooks.AfterDocRead), "open", false, `{}`, nil, codes.OK},
		{"unknown hook", "after_doc_write", "open", false, "", nil, codes.InvalidArgument},
		{"stopping", string(hooks.BeforeDocUpdate), "open", true, "", nil, codes.Unavailable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newServer(gate{&recorder{}}, nil, nil)
			s.stopped = c.stopped
			res, err := s.docHookCall(context.Background(), &pb.DocHookCall{Hook: c.hook, Request: &pb.DocHookRequest{Db: c.db, Doc: doc}, TimeoutMicros: 1e6})
			if status.Code(err) != c.wantCode {
				t.Fatalf("error %v, want code %v", err, c.wantCode)
			}
			if err != nil {
				return
			}
			if string(res.GetDoc()) != c.wantDoc {
				t.Errorf("doc %s, want %s", res.GetDoc(), c.wantDoc)
			}
			got := res.GetError()
			if (got == nil) != (c.wantErr == nil) || got != nil && (got.GetStatus() != c.wantErr.Status || got.GetError() != c.wantErr.Error || got.GetReason() != c.wantErr.Reason) {
				t.Errorf("error %v, want %v", got, c.wantErr)
			}
		})
	}
}
