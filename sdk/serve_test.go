package sdk

import (
	"bytes"
	"context"
	"net"
	"testing"

	"github.com/couchepi/couchepi/internal/h2tap"
	pb "github.com/couchepi/couchepi/internal/hookspb"
	"github.com/couchepi/couchepi/internal/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestServerSendsNoBDPPings: the plugin's gRPC server has fixed flow-control
// windows, so hook calls cost one reply write each and no bandwidth-delay
// PING rounds; gRPC's defaults (the control row) do send them.
func TestServerSendsNoBDPPings(t *testing.T) {
	cases := []struct {
		name      string
		newServer func([]grpc.ServerOption) *grpc.Server
		wantPings bool
	}{
		{"sdk server", newGRPCServer, false},
		{"grpc defaults", func(opts []grpc.ServerOption) *grpc.Server { return grpc.NewServer(opts...) }, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var tap h2tap.Recorder
			srv := c.newServer(nil)
			pb.RegisterPluginServer(srv, newServer(&recorder{}, nil, nil))
			go srv.Serve(tap.Listener(ln))
			defer srv.Stop()
			// The client side has fixed windows too (as the host has), so
			// every PING seen comes from the server's own estimator.
			conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithInitialWindowSize(wire.WindowSize), grpc.WithInitialConnWindowSize(wire.ConnWindowSize))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			client := pb.NewPluginClient(conn)
			doc := []byte(`{"_id":"a","type":"t"}`)
			for i := 0; i < 50; i++ {
				reply, err := client.BeforeDocUpdate(context.Background(), &pb.DocHookRequest{Db: "db", Doc: doc})
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(reply.GetDoc(), doc) {
					t.Fatalf("doc %s, want %s", reply.GetDoc(), doc)
				}
			}
			conn.Close()
			srv.Stop()
			pings, err := h2tap.Pings(tap.Bytes())
			if err != nil {
				t.Fatalf("reading the server's frames: %v", err)
			}
			if (pings > 0) != c.wantPings {
				t.Errorf("server sent %d PINGs; want some: %v", pings, c.wantPings)
			}
		})
	}
}
