package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/auth"
	"github.com/couchepi/couchepi/plugin/kv/etcd/etcdtest"
)

// targetLog is a proxy in front of a server that records every request
// reaching it: when, as whom (basic auth or session cookie user) and to
// which path.
type targetLog struct {
	srv *httptest.Server
	mu  sync.Mutex
	log []loggedRequest
}

type loggedRequest struct {
	at           time.Time
	user, method string
	path         string
}

func newTargetLog(t testing.TB, upstream string) *targetLog {
	l := &targetLog{}
	u, _ := url.Parse("http://" + upstream)
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.ErrorLog = nil
	l.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, _, _ := r.BasicAuth()
		if ck, err := r.Cookie(auth.CookieName); err == nil && user == "" {
			user, _, _, _ = auth.ParseCookie(ck.Value) // the replicator's session
		}
		l.mu.Lock()
		l.log = append(l.log, loggedRequest{at: time.Now(), user: user, method: r.Method, path: r.URL.Path})
		l.mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(l.srv.Close)
	return l
}

// endpoint is db behind the proxy, as user:pass.
func (l *targetLog) endpoint(auth, db string) string {
	return "http://" + auth + "@" + strings.TrimPrefix(l.srv.URL, "http://") + "/" + db
}

// since returns the requests as user to db that reached the proxy at or
// after t.
func (l *targetLog) since(t time.Time, user, db string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.log {
		if !r.at.Before(t) && r.user == user && (r.path == "/"+db || strings.HasPrefix(r.path, "/"+db+"/")) {
			out = append(out, fmt.Sprintf("%s %s %s (+%s)", r.at.Format("15:04:05.000"), r.method, r.path, r.at.Sub(t).Round(time.Millisecond)))
		}
	}
	return out
}

// TestE2EEditStopsOldRun: once the write that changes or deletes a
// replication doc is acknowledged, the old run sends nothing more to its
// target, on every path that changes a doc's replication: an edit that
// changes the replication id, a delete then a re-create under the same doc
// id, an edit that keeps the id but changes options outside it (credentials,
// worker_processes, checkpoint_interval), and the same edit through
// _bulk_docs. The source keeps being written to throughout, so an old run
// left going would have something to write. (Before the fix: the old run
// went on for up to 10 s, until its first record update.)
func TestE2EEditStopsOldRun(t *testing.T) {
	t.Parallel()
	// The defaults of how often a run records its progress: a stale run
	// would learn of the edit at its first record.
	c := startCouch(t, editConfig)
	editStopsOldRun(t, c)
}

// TestE2EClusterEditStopsOldRun is TestE2EEditStopsOldRun on a shared
// queue in a 3-member etcd, the docs edited on an api_frontend node and
// their jobs run by a replication node.
func TestE2EClusterEditStopsOldRun(t *testing.T) {
	skipShort(t)
	t.Parallel()
	etcdc := etcdtest.StartCluster(t, 3)
	prefix := fmt.Sprintf("edit-%d/", time.Now().UnixNano())
	front := startClusterNode(t, etcdc.Endpoints(), prefix, true, false, editConfig)
	startClusterNode(t, etcdc.Endpoints(), prefix, false, true, editConfig)
	editStopsOldRun(t, front)
}

// editConfig keeps the defaults of how often a run records its progress
// (a run left going would learn of the edit at its first record).
const editConfig = "stats_update_interval_sec = 10\ncheckpoint_interval = 30000\n"

// editStopsOldRun edits replication docs on c in every way that changes
// their replication, and checks the old runs' targets see nothing of
// them after each edit is acknowledged.
func editStopsOldRun(t *testing.T, c *couch) {
	c.must("PUT", "/_node/_local/_config/admins/admin2", `"pass2"`, 200)
	proxy := newTargetLog(t, c.addr)

	type edit struct {
		name string
		// change rewrites doc id's replication (src → old target, as
		// admin) once it runs; it returns the new target, the user whose
		// requests to the old target must stop, and when the change was
		// acknowledged.
		change func(t *testing.T, id, src, old string) (newTarget, oldUser string, acked time.Time)
	}
	put := func(t *testing.T, id, body string) time.Time {
		c.must("PUT", "/_replicator/"+id, body, 201)
		return time.Now()
	}
	withRev := func(id, body string) string {
		return strings.Replace(body, "{", fmt.Sprintf(`{"_rev":%q,`, c.revOf("/_replicator/"+id)), 1)
	}
	edits := []edit{
		{"new target", func(t *testing.T, id, src, old string) (string, string, time.Time) {
			tgt := old + "-new"
			return tgt, "admin", put(t, id, withRev(id, c.repDoc(src, tgt, `,"continuous":true,"create_target":true`)))
		}},
		{"delete and re-create", func(t *testing.T, id, src, old string) (string, string, time.Time) {
			c.must("DELETE", "/_replicator/"+id+"?rev="+c.revOf("/_replicator/"+id), "", 200)
			acked := time.Now()
			tgt := old + "-new"
			put(t, id, c.repDoc(src, tgt, `,"continuous":true,"create_target":true`))
			return tgt, "admin", acked
		}},
		{"same id, other credentials and options", func(t *testing.T, id, src, old string) (string, string, time.Time) {
			body := fmt.Sprintf(`{"source":%q,"target":%q,"continuous":true,"worker_processes":2,"checkpoint_interval":7000}`,
				c.endpoint(src), proxy.endpoint("admin2:pass2", old))
			return old, "admin", put(t, id, withRev(id, body))
		}},
		{"bulk_docs", func(t *testing.T, id, src, old string) (string, string, time.Time) {
			tgt := old + "-new"
			doc := withRev(id, strings.Replace(c.repDoc(src, tgt, `,"continuous":true,"create_target":true`), "{", fmt.Sprintf(`{"_id":%q,`, id), 1))
			resp := c.must("POST", "/_replicator/_bulk_docs", `{"docs":[`+doc+`]}`, 201)
			if !strings.Contains(resp, `"ok":true`) {
				t.Fatalf("bulk_docs edit: %s", resp)
			}
			return tgt, "admin", time.Now()
		}},
	}
	for i, e := range edits {
		t.Run(e.name, func(t *testing.T) {
			c.t = t
			id := fmt.Sprintf("edit%d", i)
			src, old := fmt.Sprintf("es%d", i), fmt.Sprintf("et%d", i)
			c.must("PUT", "/"+src, "", 201)
			c.must("PUT", "/"+old, "", 201)
			c.putDocs(src, 0, 5)
			body := fmt.Sprintf(`{"source":%q,"target":%q,"continuous":true}`, c.endpoint(src), proxy.endpoint("admin:pass", old))
			put(t, id, body)
			c.eventually("the first docs on the old target", 20*time.Second, func() bool { return c.docCount(old) == 5 })

			// A writer keeps the source moving through the edit.
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 5; ; n++ {
					select {
					case <-stop:
						return
					case <-time.After(50 * time.Millisecond):
					}
					c.req("PUT", fmt.Sprintf("/%s/w%05d", src, n), `{"n":1}`)
				}
			}()
			time.Sleep(300 * time.Millisecond)
			newTarget, oldUser, acked := e.change(t, id, src, old)
			time.Sleep(2500 * time.Millisecond)
			close(stop)
			wg.Wait()
			if late := proxy.since(acked, oldUser, old); len(late) > 0 {
				t.Errorf("%d requests of the old run reached its target after the edit was acknowledged:\n%s", len(late), strings.Join(late, "\n"))
			}
			// The new run has everything.
			want := c.docCount(src)
			c.eventually("the new run caught up", 30*time.Second, func() bool { return c.docCount(newTarget) == want })
			var sched struct {
				Jobs []struct {
					DocID string `json:"doc_id"`
				} `json:"jobs"`
			}
			json.Unmarshal([]byte(c.must("GET", "/_scheduler/jobs", "", 200)), &sched)
			n := 0
			for _, j := range sched.Jobs {
				if j.DocID == id {
					n++
				}
			}
			if n != 1 {
				t.Errorf("_scheduler/jobs lists %d jobs of doc %s, want 1", n, id)
			}
			c.must("DELETE", "/_replicator/"+id+"?rev="+c.revOf("/_replicator/"+id), "", 200)
		})
	}
}
