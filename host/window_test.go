package host

import (
	"bytes"
	"context"
	"net"
	"testing"

	"github.com/couchepi/couchepi/internal/h2tap"
	pb "github.com/couchepi/couchepi/internal/hookspb"
	"github.com/couchepi/couchepi/internal/wire"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// echoPlugin answers before_doc_update with the doc it got.
type echoPlugin struct {
	pb.UnimplementedPluginServer
}

func (echoPlugin) BeforeDocUpdate(_ context.Context, req *pb.DocHookRequest) (*pb.DocHookReply, error) {
	return &pb.DocHookReply{Doc: req.GetDoc()}, nil
}

// TestPluginConnSendsNoBDPPings: the host's side of a plugin connection has
// fixed flow-control windows, so a hook call is one request write and no
// bandwidth-delay PING rounds; gRPC's defaults (the control row) send them.
func TestPluginConnSendsNoBDPPings(t *testing.T) {
	cases := []struct {
		name      string
		opts      []grpc.DialOption
		wantPings bool
	}{
		{"host options", pluginDialOptions(), false},
		{"grpc defaults", nil, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			// The server side has fixed windows too (as the sdk's has), so
			// every PING seen comes from the client's own estimator.
			srv := grpc.NewServer(grpc.InitialWindowSize(wire.WindowSize), grpc.InitialConnWindowSize(wire.ConnWindowSize))
			pb.RegisterPluginServer(srv, echoPlugin{})
			go srv.Serve(ln)
			defer srv.Stop()
			var tap h2tap.Recorder
			dial := func(ctx context.Context, addr string) (net.Conn, error) {
				conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
				if err != nil {
					return nil, err
				}
				return tap.Conn(conn), nil
			}
			opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(dial)}, c.opts...)
			conn, err := grpc.NewClient(ln.Addr().String(), opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			client := pb.NewPluginClient(conn)
			for i := 0; i < 50; i++ {
				if _, err := client.BeforeDocUpdate(context.Background(), &pb.DocHookRequest{Db: "db", Doc: []byte(`{"_id":"a"}`)}); err != nil {
					t.Fatal(err)
				}
			}
			srv.Stop()
			conn.Close()
			raw := tap.Bytes()
			if !bytes.HasPrefix(raw, []byte(http2.ClientPreface)) {
				t.Fatalf("client did not start with the HTTP/2 preface")
			}
			pings, err := h2tap.Pings(raw)
			if err != nil {
				t.Fatalf("reading the client's frames: %v", err)
			}
			if (pings > 0) != c.wantPings {
				t.Errorf("client sent %d PINGs; want some: %v", pings, c.wantPings)
			}
		})
	}
}
