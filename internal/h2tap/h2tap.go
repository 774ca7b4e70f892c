// Package h2tap records what one side of an HTTP/2 connection writes and
// counts the PING frames in it, so tests can check that a gRPC peer's
// flow-control settings send no bandwidth-delay PINGs.
package h2tap

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"

	"golang.org/x/net/http2"
)

// Recorder keeps every byte written on the connections it wraps. The zero
// Recorder is ready to use.
type Recorder struct {
	mu  sync.Mutex
	out bytes.Buffer
}

// Conn returns c with its writes recorded.
func (r *Recorder) Conn(c net.Conn) net.Conn { return &conn{Conn: c, r: r} }

// Listener returns l with the writes of every accepted connection recorded.
func (r *Recorder) Listener(l net.Listener) net.Listener { return &listener{Listener: l, r: r} }

// Bytes returns a copy of what was written so far.
func (r *Recorder) Bytes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]byte(nil), r.out.Bytes()...)
}

type conn struct {
	net.Conn
	r *Recorder
}

func (c *conn) Write(b []byte) (int, error) {
	c.r.mu.Lock()
	c.r.out.Write(b)
	c.r.mu.Unlock()
	return c.Conn.Write(b)
}

type listener struct {
	net.Listener
	r *Recorder
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.r.Conn(c), nil
}

// Pings counts the PING frames (not acks) in raw, what one side of an
// HTTP/2 connection wrote. A client's raw starts with the connection
// preface, which is skipped; a server sends none.
func Pings(raw []byte) (int, error) {
	raw = bytes.TrimPrefix(raw, []byte(http2.ClientPreface))
	fr := http2.NewFramer(io.Discard, bytes.NewReader(raw))
	fr.SetMaxReadFrameSize(1 << 24)
	pings := 0
	for {
		f, err := fr.ReadFrame()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return pings, nil
		}
		if err != nil {
			return pings, err
		}
		if p, ok := f.(*http2.PingFrame); ok && !p.IsAck() {
			pings++
		}
	}
}
