package host

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"

	pb "github.com/couchepi/couchepi/hooks/hookspb"
	"github.com/couchepi/couchepi/hooks/wire"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// tapConn records every byte the client writes.
type tapConn struct {
	net.Conn
	mu  *sync.Mutex
	out *bytes.Buffer
}

func (c *tapConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	c.out.Write(b)
	c.mu.Unlock()
	return c.Conn.Write(b)
}

// echoPlugin answers before_doc_update with the doc it got.
type echoPlugin struct {
	pb.UnimplementedPluginServer
}

func (echoPlugin) BeforeDocUpdate(_ context.Context, req *pb.DocHookRequest) (*pb.DocHookReply, error) {
	return &pb.DocHookReply{Doc: req.GetDoc()}, nil
}

// clientPings counts the PING frames (not acks) in what a gRPC client wrote
// after its connection preface.
func clientPings(t *testing.T, raw []byte) int {
	t.Helper()
	if !bytes.HasPrefix(raw, []byte(http2.ClientPreface)) {
		t.Fatalf("client did not start with the HTTP/2 preface")
	}
	fr := http2.NewFramer(io.Discard, bytes.NewReader(raw[len(http2.ClientPreface):]))
	fr.SetMaxReadFrameSize(1 << 24)
	pings := 0
	for {
		f, err := fr.ReadFrame()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return pings
		}
		if err != nil {
			t.Fatalf("reading the client's frames: %v", err)
		}
		if p, ok := f.(*http2.PingFrame); ok && !p.IsAck() {
			pings++
		}
	}
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
			var mu sync.Mutex
			var out bytes.Buffer
			dial := func(ctx context.Context, addr string) (net.Conn, error) {
				conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
				if err != nil {
					return nil, err
				}
				return &tapConn{Conn: conn, mu: &mu, out: &out}, nil
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
			mu.Lock()
			raw := append([]byte(nil), out.Bytes()...)
			mu.Unlock()
			if pings := clientPings(t, raw); (pings > 0) != c.wantPings {
				t.Errorf("client sent %d PINGs; want some: %v", pings, c.wantPings)
			}
		})
	}
}
