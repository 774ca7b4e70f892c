package replicate

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/couchepi/couchepi/parse"
)

// TestStallModes (issue 31 item 1): every way a run can stop making
// progress while behind its source ends it with an error (the job then
// crashes visibly and restarts) within StallTimeout plus the interval at
// which it learns its source moved (pendingInterval), however long the
// connection timeout. The faults come from a proxy in front of the far
// end; the connection timeout is CouchDB's 30 s, so the timeouts of the
// HTTP client cannot be what ends these runs.
func TestStallModes(t *testing.T) {
	s := startServer(t)
	const stall = 2 * time.Second
	bound := stall + pendingInterval + 4*time.Second
	silent := silentTarget(t)
	tests := []struct {
		name   string
		fault  func(r *http.Request) fault
		target func(src string) parse.Endpoint // nil: the proxied server
	}{
		{name: "changes feed open and silent, no heartbeats", fault: func(r *http.Request) fault {
			if strings.HasSuffix(r.URL.Path, "/_changes") && r.URL.Query().Get("feed") == "continuous" {
				return hangOpen
			}
			return passThrough
		}},
		{name: "response stops mid-body", fault: func(r *http.Request) fault {
			if strings.HasSuffix(r.URL.Path, "/_bulk_get") || r.URL.Query().Get("open_revs") != "" {
				return hangHalf
			}
			return passThrough
		}},
		{name: "_bulk_docs never answers", fault: func(r *http.Request) fault {
			if strings.HasSuffix(r.URL.Path, "/_bulk_docs") {
				return hangSilent
			}
			return passThrough
		}},
		{name: "_revs_diff answers 200 with a truncated body", fault: func(r *http.Request) fault {
			if strings.HasSuffix(r.URL.Path, "/_revs_diff") {
				return truncated
			}
			return passThrough
		}},
		{name: "target accepts connections and never reads", fault: func(*http.Request) fault { return passThrough },
			target: func(string) parse.Endpoint { return parse.Endpoint{URL: silent + "/tgt/"} }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newFaultProxy(t, s)
			ps := p.endpointServer(s)
			src, tgt := s.newDB(t, "src"), s.newDB(t, "tgt")
			addDocs(t, s, src, 0, 20)
			p.setFaults(func(_ int, r *http.Request, _ []byte) fault { return tc.fault(r) })
			rep := testRep(ps, src, tgt)
			rep.Continuous = true
			rep.ConnectionTimeout = 30000
			rep.RetriesPerRequest = 2
			if tc.target != nil {
				rep.Target = tc.target(src)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			start := time.Now()
			_, err := Run(ctx, rep, Options{ServerUUID: "0123456789abcdef0123456789abcdef", StallTimeout: stall})
			took := time.Since(start)
			var re *Error
			if err == nil || errors.Is(err, ErrStopped) || !errors.As(err, &re) {
				t.Fatalf("run ended with %v after %v: want a visible error", err, took)
			}
			if took > bound {
				t.Fatalf("run ended %v after it started (%v): want within %v", took, err, bound)
			}
			t.Logf("ended after %v: %s", took.Round(100*time.Millisecond), re.Error())
		})
	}
}

// TestNoStallWhenCaughtUp: a continuous run that has caught up and
// receives nothing is idle, not stalled.
func TestNoStallWhenCaughtUp(t *testing.T) {
	s := startServer(t)
	src, tgt := s.newDB(t, "src"), s.newDB(t, "tgt")
	addDocs(t, s, src, 0, 5)
	rep := testRep(s, src, tgt)
	rep.Continuous = true
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, rep, Options{ServerUUID: "0123456789abcdef0123456789abcdef", StallTimeout: 500 * time.Millisecond})
		done <- err
	}()
	waitDocCount(t, s, tgt, 5)
	select {
	case err := <-done:
		t.Fatalf("a caught-up run ended: %v", err)
	case <-time.After(pendingInterval + 2*time.Second):
	}
	cancel()
	if err := <-done; !errors.Is(err, ErrStopped) {
		t.Fatalf("stopped run: %v", err)
	}
}

// silentTarget is a server that accepts connections and never reads them.
func silentTarget(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + ln.Addr().String()
}

// TestLagFollowsWriter (issue 31 item 3): lag_sec follows a paced writer
// the replication cannot keep up with (every _bulk_docs takes a second),
// and goes back to 0 once it has caught up.
func TestLagFollowsWriter(t *testing.T) {
	s := startServer(t)
	p := newFaultProxy(t, s)
	p.slow = time.Second
	ps := p.endpointServer(s)
	src, tgt := s.newDB(t, "src"), s.newDB(t, "tgt")
	p.setFaults(func(_ int, r *http.Request, _ []byte) fault {
		if strings.HasSuffix(r.URL.Path, "/_bulk_docs") {
			return slowResponse
		}
		return passThrough
	})
	rep := testRep(ps, src, tgt)
	rep.Continuous = true
	rep.WorkerProcesses = 1
	var live atomic.Pointer[func() Stats]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, rep, Options{ServerUUID: "0123456789abcdef0123456789abcdef", Live: func(f func() Stats) { live.Store(&f) }})
		done <- err
	}()
	lag := func() int64 {
		if f := live.Load(); f != nil {
			if l := (*f)().LagSec; l != nil {
				return *l
			}
		}
		return -1
	}
	// Paced: 5 writes a second for 4 seconds.
	most := int64(0)
	for i := 0; i < 20; i++ {
		addDocs(t, s, src, i, i+1)
		time.Sleep(200 * time.Millisecond)
		most = max(most, lag())
	}
	if most < 2 {
		t.Fatalf("lag_sec reached only %d while the replication lagged a writer for 4 s", most)
	}
	waitDocCount(t, s, tgt, 20)
	deadline := time.Now().Add(10 * time.Second)
	for lag() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("lag_sec still %d after the replication caught up", lag())
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("lag_sec reached %d s behind the writer, and 0 once caught up", most)
	cancel()
	<-done
}
