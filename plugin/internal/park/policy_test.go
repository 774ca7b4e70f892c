package park

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/couchclient"
	"github.com/couchepi/couchepi/plugin/internal/jobdata"
	"github.com/couchepi/couchepi/plugin/internal/jobstore"
	"github.com/couchepi/couchepi/plugin/internal/seal"
	"github.com/couchepi/couchepi/plugin/jobs"
	"github.com/couchepi/couchepi/plugin/kv"
)

// TestParkedOnForbiddenHost: a job parked on a remote source that the host
// policy now forbids its creator (its `_db_updates` feed and its check are
// refused) is woken, so that a run reports it, instead of staying parked
// for good, and counted in the waker's Stats.
func TestParkedOnForbiddenHost(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Write([]byte(`{"results":[]}`))
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	source := "http://localhost:" + u.Port() + "/src/" // remote: not the local URL

	store, err := kv.OpenBolt(filepath.Join(t.TempDir(), "jobs.db"), kv.BoltOptions{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	q, err := jobs.New(store, jobs.Options{Prefix: []byte(jobstore.QueuePrefix), Tag: jobdata.ShareTag})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.SetTypeTimeout(context.Background(), jobdata.JobType, time.Minute); err != nil {
		t.Fatal(err)
	}
	rep := &parse.Rep{Source: parse.Endpoint{URL: source}, Target: parse.Endpoint{URL: "http://127.0.0.1:5984/tgt/"},
		Continuous: true, UserCtx: parse.UserCtx{Name: "bob"}, RetriesPerRequest: 0}
	rec := jobdata.New(rep, "", "", "", time.Now())
	rec.Parked = &jobdata.Parked{Since: time.Now().Unix(), Seq: json.RawMessage(`"1"`)}
	const id = "parked"
	if err := q.Transact(context.Background(), func(tx *jobs.Tx) error {
		return tx.Add(jobdata.JobType, id, rec.Encode(testKeys, id), jobstore.ParkedTime())
	}); err != nil {
		t.Fatal(err)
	}

	pool := couchclient.NewPool(couchclient.PoolOptions{LocalURL: "http://127.0.0.1:5984/"})
	defer pool.Close()
	o, _ := parse.OptionsFromConfig(map[string]string{"denied_networks": "127.0.0.0/8, ::1"})
	pool.Configure(o)
	w := New(Options{Queue: q, Keys: testKeys, Pool: pool, LocalURL: "http://127.0.0.1:5984/"})
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	deadline := time.Now().Add(30 * time.Second)
	for {
		var got *jobdata.Record
		q.Transact(context.Background(), func(tx *jobs.Tx) error {
			got, err = jobstore.Get(tx, testKeys, id)
			return err
		})
		if got != nil && got.Parked == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the job parked on a forbidden host was not woken")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the forbidden source got %d requests", n)
	}
	w.Stop() // waits for the wake to be counted
	if got := w.Stats(); got.Wakes != 1 {
		t.Fatalf("waker stats %+v, want 1 wake", got)
	}
}

// testKeys seals the job records of these tests.
var testKeys = seal.NewKeyring(seal.RandomKey())
