package replicate

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestFenceStopsWrites: once a run's fence closes (its runner lost the
// job), no request of the run reaches either endpoint, not even a final
// checkpoint, while the run is stopped as its runner does (ErrAbandoned).
func TestFenceStopsWrites(t *testing.T) {
	s := startServer(t)
	p := newFaultProxy(t, s)
	ps := p.endpointServer(s)
	src, tgt := s.newDB(t, "src"), s.newDB(t, "tgt")
	addDocs(t, s, src, 0, 50)

	var closed atomic.Bool
	var after atomic.Int64 // requests the proxy saw once the fence closed
	p.setFaults(func(_ int, _ *http.Request, _ []byte) fault {
		if closed.Load() {
			after.Add(1)
		}
		return passThrough
	})
	errLost := errors.New("lease lost")
	rep := testRep(ps, src, tgt)
	rep.Continuous = true
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, rep, Options{ServerUUID: "0123456789abcdef0123456789abcdef", Fence: func() error {
			if closed.Load() {
				return errLost
			}
			return nil
		}})
		done <- err
	}()
	waitDocCount(t, s, tgt, 50)
	closed.Store(true)
	addDocs(t, s, src, 50, 80) // the live feed brings them: they must not be written
	time.Sleep(time.Second)
	cancel(ErrAbandoned) // what the runner does once it sees the lease lost
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("run did not end")
	}
	if n := after.Load(); n != 0 {
		t.Fatalf("%d requests reached the endpoints after the fence closed", n)
	}
	var info struct {
		DocCount int `json:"doc_count"`
	}
	json.Unmarshal(s.mustDo(t, "GET", tgt, nil), &info)
	if info.DocCount != 50 {
		t.Fatalf("target has %d docs, want the 50 written before the fence closed", info.DocCount)
	}
}

// TestBeforeCheckpoint: the runner's proof of ownership gates every
// checkpoint; ErrSkipCheckpoint leaves it out without failing the run, any
// other error fails the run.
func TestBeforeCheckpoint(t *testing.T) {
	s := startServer(t)
	tests := []struct {
		name      string
		proof     error
		wantErr   string
		wantLocal bool
	}{
		{name: "proved", proof: nil, wantLocal: true},
		{name: "skipped", proof: errors.Join(ErrSkipCheckpoint, errors.New("queue unreachable"))},
		{name: "refused", proof: errors.New("job taken"), wantErr: "job taken"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src, tgt := s.newDB(t, "src"), s.newDB(t, "tgt")
			addDocs(t, s, src, 0, 20)
			rep := testRep(s, src, tgt)
			var calls atomic.Int64
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			_, err := Run(ctx, rep, Options{ServerUUID: "0123456789abcdef0123456789abcdef",
				BeforeCheckpoint: func(_ context.Context, st Stats) error {
					calls.Add(1)
					if st.DocsWritten != 20 {
						t.Errorf("proof asked with docs_written %d, want 20", st.DocsWritten)
					}
					return tc.proof
				}})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Run: %v, want an error with %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if calls.Load() == 0 {
				t.Fatal("BeforeCheckpoint never called")
			}
			code, body := s.do(t, "GET", tgt+"/_local_docs", nil)
			has := code == 200 && strings.Contains(string(body), `"_local/`)
			if has != tc.wantLocal {
				t.Fatalf("checkpoint on the target: %v, want %v (%s)", has, tc.wantLocal, body)
			}
		})
	}
}
