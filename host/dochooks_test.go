package host

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/couchepi/couchepi/hooks"
	pb "github.com/couchepi/couchepi/internal/hookspb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// streamPlugin serves DocHooks: it rejects docs of db "locked", never
// answers for db "hang" (until the stream ends) and returns other docs as-is.
type streamPlugin struct {
	echoPlugin
}

func (streamPlugin) DocHooks(stream pb.Plugin_DocHooksServer) error {
	for {
		call, err := stream.Recv()
		if err != nil {
			return err
		}
		res := &pb.DocHookResult{Doc: call.GetRequest().GetDoc()}
		switch call.GetRequest().GetDb() {
		case "locked":
			res = &pb.DocHookResult{Error: &pb.CouchError{Status: 403, Error: "forbidden", Reason: "locked"}}
		case "hang":
			<-stream.Context().Done()
			return stream.Context().Err()
		}
		if err := stream.Send(res); err != nil {
			return err
		}
	}
}

// testInstance connects an instance to an in-process Plugin server.
func testInstance(t *testing.T, impl pb.PluginServer) *instance {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterPluginServer(srv, impl)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), append(pluginDialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	inst := &instance{rpc: pb.NewPluginClient(conn), hookStreams: make(chan *hookStream, idleHookStreams)}
	inst.streamCtx, inst.stopStreams = context.WithCancel(context.Background())
	t.Cleanup(inst.stopStreams)
	return inst
}

// TestDocHookStreams: calls go over a reused DocHooks stream (kept after a
// rejection, dropped after a call that got no answer) or, for a plugin
// without DocHooks, over the unary RPC.
func TestDocHookStreams(t *testing.T) {
	doc := []byte(`{"_id":"a"}`)
	cases := []struct {
		name      string
		impl      pb.PluginServer
		db        string
		retired   bool
		wantDoc   string
		wantCE    bool
		wantErr   bool
		wantIdle  int  // idle streams after the call
		wantUnary bool // the instance fell back to unary calls
	}{
		{"stream answer", streamPlugin{}, "open", false, `{"_id":"a"}`, false, false, 1, false},
		{"stream rejection keeps the stream", streamPlugin{}, "locked", false, "", true, false, 1, false},
		{"no answer drops the stream", streamPlugin{}, "hang", false, "", false, true, 0, false},
		{"retired instance", streamPlugin{}, "open", true, "", false, true, 0, false},
		{"plugin without DocHooks", echoPlugin{}, "open", false, `{"_id":"a"}`, false, false, 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			inst := testInstance(t, c.impl)
			if c.retired {
				inst.stopStreams()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			// Twice: the second call must find the first call's stream (or
			// the unary fallback) in the same state.
			for k := 0; k < 2; k++ {
				got, ce, err := inst.docHook(ctx, hooks.BeforeDocUpdate, &pb.DocHookRequest{Db: c.db, Doc: doc})
				if (err != nil) != c.wantErr || (ce != nil) != c.wantCE || string(got) != c.wantDoc {
					t.Fatalf("call %d: doc %q, rejection %v, error %v", k, got, ce, err)
				}
				if ce != nil && (ce.Status != 403 || ce.Err != "forbidden" || ce.Reason != "locked") {
					t.Errorf("rejection %+v", ce)
				}
				if len(inst.hookStreams) != c.wantIdle || inst.unaryHooks.Load() != c.wantUnary {
					t.Errorf("call %d: %d idle streams, unary %v; want %d, %v", k, len(inst.hookStreams), inst.unaryHooks.Load(), c.wantIdle, c.wantUnary)
				}
				if c.db == "hang" {
					break
				}
			}
		})
	}
}
