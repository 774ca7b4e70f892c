package replicate

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fault is what the proxy does to one request.
type fault int

const (
	passThrough   fault = iota
	fail500             // answer 500 without forwarding
	fail429             // answer 429 without forwarding
	fail413             // answer 413 without forwarding
	fail405             // answer 405 without forwarding
	fail403             // answer 403 forbidden, as a validate_doc_update refusing the doc
	fail401             // answer 401 unauthorized, as a server refusing the credentials
	cutResponse         // forward, then cut the connection halfway through the body
	slowResponse        // wait past the client's timeout, then forward
	rejectDocs          // _bulk_docs: drop docs whose id starts with "reject", report them forbidden
	answerMissing       // open_revs GET: answer 200 [{"missing":rev}], as a source whose shard lags
	uriTooLong          // answer 414 Request-URI Too Long without forwarding
	hangOpen            // answer 200 with the opening bytes of a feed, then nothing until the client goes
	hangHalf            // forward, send half the body, then nothing until the client goes
	hangSilent          // read the request, never answer
	truncated           // forward, send half the body (full Content-Length) and close the connection
	garbledPart         // open_revs GET: answer multipart/mixed whose one JSON part is not JSON
)

// faultProxy is a reverse proxy in front of the far-end server that injects
// faults chosen per request and counts what passes through it.
type faultProxy struct {
	upstream string
	srv      *httptest.Server
	slow     time.Duration

	mu       sync.Mutex
	choose   func(n int, r *http.Request, body []byte) fault
	n        int
	counts   map[string]int // "METHOD lastPathSegment" → requests
	docsRead int            // revisions asked for by _bulk_get and individual GETs
}

func newFaultProxy(t testing.TB, s *testServer) *faultProxy {
	p := &faultProxy{upstream: strings.TrimSuffix(s.Base, "/"), counts: map[string]int{}, slow: 2 * time.Second}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

// newTLSFaultProxy is newFaultProxy serving https with cfg (its
// certificates, client auth).
func newTLSFaultProxy(t testing.TB, s *testServer, cfg *tls.Config) *faultProxy {
	p := &faultProxy{upstream: strings.TrimSuffix(s.Base, "/"), counts: map[string]int{}, slow: 2 * time.Second}
	p.srv = httptest.NewUnstartedServer(http.HandlerFunc(p.serve))
	p.srv.TLS = cfg
	p.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are the point
	p.srv.StartTLS()
	t.Cleanup(p.srv.Close)
	return p
}

// endpointServer is a testServer view whose URLs go through the proxy.
func (p *faultProxy) endpointServer(s *testServer) *testServer {
	return &testServer{Kind: s.Kind, Base: p.srv.URL + "/", User: s.User, Pass: s.Pass}
}

func (p *faultProxy) setFaults(f func(n int, r *http.Request, body []byte) fault) {
	p.mu.Lock()
	p.choose, p.n = f, 0
	p.mu.Unlock()
}

func (p *faultProxy) resetCounts() {
	p.mu.Lock()
	p.counts, p.docsRead = map[string]int{}, 0
	p.mu.Unlock()
}

func (p *faultProxy) fetched() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.docsRead
}

func (p *faultProxy) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	seg := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
	p.mu.Lock()
	p.n++
	n := p.n
	p.counts[r.Method+" "+seg]++
	switch {
	case r.Method == "POST" && seg == "_bulk_get":
		var v struct {
			Docs []json.RawMessage `json:"docs"`
		}
		json.Unmarshal(body, &v)
		p.docsRead += len(v.Docs)
	case r.Method == "GET" && r.URL.Query().Get("open_revs") != "":
		p.docsRead++
	}
	f := passThrough
	if p.choose != nil {
		f = p.choose(n, r, body)
	}
	p.mu.Unlock()
	switch f {
	case fail500:
		http.Error(w, `{"error":"internal_server_error","reason":"injected"}`, http.StatusInternalServerError)
		return
	case fail429:
		http.Error(w, `{"error":"too_many_requests","reason":"injected"}`, http.StatusTooManyRequests)
		return
	case fail413:
		http.Error(w, `{"error":"too_large","reason":"injected"}`, http.StatusRequestEntityTooLarge)
		return
	case fail403:
		http.Error(w, `{"error":"forbidden","reason":"injected rejection"}`, http.StatusForbidden)
		return
	case fail401:
		http.Error(w, `{"error":"unauthorized","reason":"injected refusal"}`, http.StatusUnauthorized)
		return
	case fail405:
		http.Error(w, `{"error":"method_not_allowed","reason":"injected"}`, http.StatusMethodNotAllowed)
		return
	case slowResponse:
		select {
		case <-time.After(p.slow):
		case <-r.Context().Done():
			return
		}
	case rejectDocs:
		p.rejectDocs(w, r, body)
		return
	case answerMissing:
		var revs []string
		json.Unmarshal([]byte(r.URL.Query().Get("open_revs")), &revs)
		rows := []map[string]string{}
		for _, rev := range revs {
			rows = append(rows, map[string]string{"missing": rev})
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(rows)
		return
	case uriTooLong:
		http.Error(w, `{"error":"too_long","reason":"injected"}`, http.StatusRequestURITooLong)
		return
	case garbledPart:
		w.Header().Set("Content-Type", `multipart/mixed; boundary="b"`)
		io.WriteString(w, "--b\r\nContent-Type: application/json\r\n\r\n{\"_id\":\"d\",\"_rev\r\n--b--")
		return
	case hangOpen:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.Write([]byte(`{"results":[` + "\n"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		return
	case hangSilent:
		<-r.Context().Done()
		return
	}
	resp, err := p.forward(r, body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	if f == hangHalf {
		full, _ := io.ReadAll(resp.Body)
		w.Header().Set("Content-Length", itoa(len(full)))
		w.WriteHeader(resp.StatusCode)
		w.Write(full[:len(full)/2])
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		return
	}
	if f == cutResponse || f == truncated {
		full, _ := io.ReadAll(resp.Body)
		w.Header().Set("Content-Length", itoa(len(full)))
		w.WriteHeader(resp.StatusCode)
		w.Write(full[:len(full)/2])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
	w.WriteHeader(resp.StatusCode)
	flushCopy(w, resp.Body)
}

// flushCopy copies a response through, flushing every chunk so feeds stream.
func flushCopy(w http.ResponseWriter, r io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
		if err != nil {
			return
		}
	}
}

func (p *faultProxy) forward(r *http.Request, body []byte) (*http.Response, error) {
	req, _ := http.NewRequestWithContext(r.Context(), r.Method, p.upstream+r.URL.RequestURI(), bytes.NewReader(body))
	for k, v := range r.Header {
		req.Header[k] = v
	}
	req.Header.Del("Accept-Encoding")
	return proxyTransport.RoundTrip(req)
}

// proxyTransport never asks for gzip: a compressing far end would buffer feeds.
var proxyTransport = &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 64}

// rejectDocs forwards a _bulk_docs without the "reject*" docs and answers as
// a target whose validate_doc_update refused them.
func (p *faultProxy) rejectDocs(w http.ResponseWriter, r *http.Request, body []byte) {
	var in struct {
		NewEdits bool              `json:"new_edits"`
		Docs     []json.RawMessage `json:"docs"`
	}
	json.Unmarshal(body, &in)
	var keep []json.RawMessage
	var rejected []map[string]string
	for _, d := range in.Docs {
		if id, _ := docIDRev(d); strings.HasPrefix(id, "reject") {
			rejected = append(rejected, map[string]string{"id": id, "error": "forbidden", "reason": "injected rejection"})
		} else {
			keep = append(keep, d)
		}
	}
	fwd, _ := json.Marshal(map[string]any{"new_edits": in.NewEdits, "docs": keep})
	resp, err := p.forward(r, fwd)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	var results []map[string]any
	json.NewDecoder(resp.Body).Decode(&results)
	for _, rj := range rejected {
		results = append(results, map[string]any{"id": rj["id"], "error": rj["error"], "reason": rj["reason"]})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(201)
	json.NewEncoder(w).Encode(results)
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
