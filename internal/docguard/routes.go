package docguard

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strconv"

	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/sdk"
)

// ServeHTTP serves /_docguard/stats (counters), /_docguard/echo (what the
// plugin received: method, path, query, user, body length and sha256) and
// /_docguard/blob?size=N (N bytes, streamed in 1 MiB flushed pieces).
func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/_docguard/stats":
		if r.Method != http.MethodGet {
			methodNotAllowed(w, "GET")
			return
		}
		writeJSON(w, http.StatusOK, g.stats())
	case "/_docguard/echo":
		h := sha256.New()
		n, err := io.Copy(h, r.Body)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, &hooks.Error{Status: 400, Err: "bad_request", Reason: err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"method": r.Method, "path": r.URL.EscapedPath(), "query": r.URL.RawQuery,
			"user": sdk.User(r), "length": n, "sha256": hex.EncodeToString(h.Sum(nil)),
			"header": r.Header.Get("X-Docguard-Test"), "version": g.version,
		})
	case "/_docguard/blob":
		size, err := strconv.ParseInt(r.URL.Query().Get("size"), 10, 64)
		if err != nil || size < 0 {
			writeJSON(w, http.StatusBadRequest, &hooks.Error{Status: 400, Err: "bad_request", Reason: "size must be a non-negative integer"})
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		piece := make([]byte, 1<<20)
		for i := range piece {
			piece[i] = 'a' + byte(i%26)
		}
		for size > 0 {
			n := int64(len(piece))
			if n > size {
				n = size
			}
			if _, err := w.Write(piece[:n]); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			size -= n
		}
	default:
		writeJSON(w, http.StatusNotFound, hooks.NotFound("missing"))
	}
}

func (g *guard) stats() map[string]any {
	g.mu.Lock()
	defer g.mu.Unlock()
	calls := map[string]map[string]int64{}
	for h, m := range g.calls {
		c := map[string]int64{}
		for db, n := range m {
			c[db] = n
		}
		calls[string(h)] = c
	}
	audit := map[string]any{}
	if g.audit != nil {
		for db, ids := range g.audit.docs {
			audit[db] = map[string]any{"docs": len(ids), "last_seq": g.audit.seqs[db]}
		}
	}
	catch := map[string]int64{}
	for db, n := range g.catch {
		catch[db] = n
	}
	return map[string]any{"version": g.version, "pid": os.Getpid(), "started": g.audit != nil,
		"calls": calls, "catch_up": catch, "audit": audit}
}

func methodNotAllowed(w http.ResponseWriter, allow string) {
	w.Header().Set("Allow", allow)
	writeJSON(w, http.StatusMethodNotAllowed, &hooks.Error{Status: 405, Err: "method_not_allowed", Reason: "Only " + allow + " allowed"})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(v)
	w.Write(append(b, '\n'))
}
