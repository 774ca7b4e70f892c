package host_test

import (
	"context"
	"encoding/json"
	"log"
	"net/http"
	"strings"
	"sync"

	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/host"
)

// store is a server's storage, reduced to one map of db -> id -> doc. A real
// server implements hooks.Services on what it already has.
type store struct {
	mu   sync.Mutex
	docs map[string]map[string][]byte
	seq  map[string]int
}

func (s *store) ServerInfo(context.Context) (hooks.ServerInfo, error) {
	return hooks.ServerInfo{UUID: "85fb71bf700c17267fef77535820e371", Version: "3.5.0", Vendor: "example",
		Node: "nonode@nohost", URL: "http://127.0.0.1:5984/"}, nil
}

func (s *store) ListDBs(context.Context) ([]hooks.DBInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var dbs []hooks.DBInfo
	for name := range s.docs {
		dbs = append(dbs, hooks.DBInfo{Name: name})
	}
	return dbs, nil
}

func (s *store) Changes(ctx context.Context, db, since string, limit int) (hooks.ChangesPage, error) {
	return hooks.ChangesPage{LastSeq: since}, nil // this store keeps no history
}

func (s *store) GetDoc(_ context.Context, db, id string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if doc, ok := s.docs[db][id]; ok {
		return doc, nil
	}
	return nil, hooks.NotFound("missing")
}

func (s *store) UpdateDoc(_ context.Context, db string, doc []byte) (string, error) {
	var body struct {
		ID string `json:"_id"`
	}
	json.Unmarshal(doc, &body)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.docs[db][body.ID] = doc
	s.seq[db]++
	return "1-x", nil
}

// Embedding the host in a server: load the plugins, mount the host for the
// plugins' routes, and call it on the write path.
func Example() {
	db := &store{docs: map[string]map[string][]byte{"_replicator": {}}, seq: map[string]int{}}
	h := host.New(host.Config{
		Services: db,
		Config:   hooks.Config{"replicator": {"max_jobs": "500"}},
		StateDir: "/var/lib/mycouch/plugins",
	})
	defer h.Close()
	if err := h.Load(context.Background(), host.Spec{Path: "bin/replicator"}); err != nil {
		log.Fatal(err)
	}

	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		user := hooks.UserCtx{Name: "alice", Roles: []string{}} // from your auth
		if h.HasRoute(r.Method, r.URL.EscapedPath()) {
			h.ServeHTTP(w, r.WithContext(host.WithUser(r.Context(), user)))
			return
		}
		// PUT /{db}/{docid}: the write path.
		name, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		var doc json.RawMessage
		json.NewDecoder(r.Body).Decode(&doc)
		if h.Subscribed(hooks.BeforeDocUpdate, name) {
			checked, err := h.BeforeDocUpdate(r.Context(), name, doc, user)
			if err != nil {
				he := err.(*hooks.Error) // returned to the client as-is
				w.WriteHeader(he.Status)
				json.NewEncoder(w).Encode(he)
				return
			}
			doc = checked
		}
		rev, _ := db.UpdateDoc(r.Context(), name, doc)
		if h.Subscribed(hooks.AfterDocWrite, name) {
			h.AfterDocWrite(hooks.DocWrite{DB: name, Rev: rev, Seq: "1", Doc: doc})
		}
		w.WriteHeader(http.StatusCreated)
	})
	log.Fatal(http.ListenAndServe("127.0.0.1:5984", nil))
}
