package sdk

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

// tapListener records every byte the server writes on its connections.
type tapListener struct {
	net.Listener
	mu  sync.Mutex
	out bytes.Buffer
}

func (l *tapListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &tapConn{Conn: c, l: l}, nil
}

func (l *tapListener) written() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]byte(nil), l.out.Bytes()...)
}

type tapConn struct {
	net.Conn
	l *tapListener
}

func (c *tapConn) Write(b []byte) (int, error) {
	c.l.mu.Lock()
	c.l.out.Write(b)
	c.l.mu.Unlock()
	return c.Conn.Write(b)
}

// serverPings counts the PING frames (not acks) in what a gRPC server
// wrote: an HTTP/2 server sends no preface of its own, only frames.
func serverPings(t *testing.T, raw []byte) int {
	t.Helper()
	fr := http2.NewFramer(io.Discard, bytes.NewReader(raw))
	fr.SetMaxReadFrameSize(1 << 24)
	pings := 0
	for {
		f, err := fr.ReadFrame()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return pings
		}
		if err != nil {
			t.Fatalf("reading the server's frames: %v", err)
		}
		if p, ok := f.(*http2.PingFrame); ok && !p.IsAck() {
			pings++
		}
	}
}

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
			tap := &tapListener{Listener: ln}
			srv := c.newServer(nil)
			pb.RegisterPluginServer(srv, newServer(&recorder{}, nil))
			go srv.Serve(tap)
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
			if pings := serverPings(t, tap.written()); (pings > 0) != c.wantPings {
				t.Errorf("server sent %d PINGs; want some: %v", pings, c.wantPings)
			}
		})
	}
}
