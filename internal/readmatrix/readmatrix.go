// Package readmatrix is the matrix of read paths of a replicator db that a
// non-admin who does not own a replication doc may try (issue 38 item 4):
// every way to ask a CouchDB-compatible server for docs, revisions,
// conflicts, _local docs, attachments, changes, queries and views, in GET
// and POST forms. A server passes when no answer to these requests, body
// or headers, shows a credential of another user's doc or its stored
// revision. The tests of minicouch and of the kivik x/server host share it.
package readmatrix

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Doc is another user's replication doc: its id and the revision it is
// stored under.
type Doc struct{ ID, Rev string }

// Request is one read of the matrix.
type Request struct {
	Method, Path, Body string
	Header             map[string]string
}

func (r Request) String() string {
	s := r.Method + " " + r.Path
	if r.Body != "" {
		s += " " + r.Body
	}
	for k, v := range r.Header {
		s += fmt.Sprintf(" [%s: %s]", k, v)
	}
	return s
}

// DesignDoc is a design doc with a view that emits whatever a
// replication doc holds; an admin stores it in the db before the matrix
// runs (where the server has views), as _design/peek.
const DesignDoc = `{"views":{"all":{"map":"function(doc){emit(doc._id,{rev:doc._rev,source:doc.source,target:doc.target});}"}}}`

// Rows returns the matrix for the replicator db db ("_replicator") and
// the docs of another user in it.
func Rows(db string, docs []Doc) []Request {
	p := "/" + db
	json := map[string]string{"Content-Type": "application/json"}
	get := func(path string) Request { return Request{Method: "GET", Path: p + path} }
	post := func(path, body string) Request {
		return Request{Method: "POST", Path: p + path, Body: body, Header: json}
	}
	var rows []Request
	ids := make([]string, len(docs))
	for i, d := range docs {
		ids[i] = `"` + d.ID + `"`
		id, rev := "/"+d.ID, d.Rev
		rows = append(rows,
			get(id), Request{Method: "HEAD", Path: p + id},
			get(id+"?revs=true"), get(id+"?revs_info=true"), get(id+"?conflicts=true"),
			get(id+"?deleted_conflicts=true"), get(id+"?meta=true"), get(id+"?local_seq=true"),
			get(id+"?rev="+rev), get(id+"?rev="+rev+"&revs=true"), get(id+"?latest=true&rev="+rev),
			Request{Method: "HEAD", Path: p + id + "?rev=" + rev},
			get(id+"?open_revs=all"), get(id+`?open_revs=["`+rev+`"]`), get(id+"?OPEN_REVS=all"),
			Request{Method: "GET", Path: p + id + "?open_revs=all", Header: map[string]string{"Accept": "multipart/mixed"}},
			get(id+"?attachments=true&att_encoding_info=true"),
			Request{Method: "GET", Path: p + id + "?attachments=true", Header: map[string]string{"Accept": "multipart/related"}},
			get(id+"/att.txt"), get("/_local"+id),
			get(id+"/"), get("/"+id), get("/."+id), Request{Method: "GET", Path: "/" + p + id},
			post("/_bulk_get", `{"docs":[{"id":"`+d.ID+`"}]}`),
			post("/_bulk_get?revs=true&latest=true", `{"docs":[{"id":"`+d.ID+`","rev":"`+rev+`"}]}`),
			post("/_revs_diff", `{"`+d.ID+`":["`+rev+`","9-0123456789abcdef0123456789abcdef"]}`),
			post("/_missing_revs", `{"`+d.ID+`":["`+rev+`"]}`),
		)
	}
	keys := strings.Join(ids, ",")
	rows = append(rows,
		get(""), get("/_all_docs"), get("/_all_docs?include_docs=true"), get("/_all_docs?include_docs=TRUE"),
		get("/_all_docs?include_docs=false&include_docs=true"), get("/_all_docs?conflicts=true&include_docs=true"),
		get("/_all_docs?keys=["+keys+"]"), get("/_all_docs?key="+ids[0]+"&include_docs=true"),
		post("/_all_docs", `{"keys":[`+keys+`]}`), post("/_all_docs", `{"include_docs":true}`),
		post("/_all_docs?include_docs=true", `{"keys":[`+keys+`]}`),
		post("/_all_docs/queries", `{"queries":[{}]}`), post("/_all_docs/queries", `{"queries":[{"include_docs":true}]}`),
		post("/_all_docs/queries", `{"queries":[{"keys":[`+keys+`]}]}`),
		get("/_design_docs"), get("/_design_docs?include_docs=true"),
		post("/_design_docs", `{"include_docs":true}`), post("/_design_docs/queries", `{"queries":[{"include_docs":true}]}`),
		get("/_local_docs?include_docs=true"), post("/_local_docs", `{"include_docs":true}`),
		get("/_changes"), get("/_changes?include_docs=true"), get("/_changes?style=all_docs"),
		get("/_changes?include_docs=true&conflicts=true&attachments=true&style=all_docs"),
		get("/_changes?include_docs=TRUE"), get("/_changes?feed=normal&include_docs=true"),
		get("/_changes?feed=longpoll&timeout=300&include_docs=true"),
		get("/_changes?feed=continuous&timeout=300&include_docs=true"),
		get("/_changes?feed=eventsource&timeout=300&include_docs=true"),
		get("/_changes?filter=_doc_ids&doc_ids=["+keys+"]&include_docs=true"),
		post("/_changes", `{"include_docs":true}`),
		post("/_changes?filter=_doc_ids", `{"doc_ids":[`+keys+`]}`),
		post("/_changes?filter=_doc_ids&include_docs=true", `{"doc_ids":[`+keys+`]}`),
		post("/_changes?filter=_selector&include_docs=true", `{"selector":{"_id":{"$gt":null}}}`),
		post("/_find", `{"selector":{"_id":{"$gt":null}}}`),
		post("/_find", `{"selector":{"_id":{"$gt":null}},"fields":["_id","_rev","source","target"],"conflicts":true}`),
		post("/_explain", `{"selector":{"_id":{"$gt":null}}}`), get("/_index"),
		get("/_purged_infos"), get("/_security"),
		get("/_design/peek"), get("/_design/peek/_view/all"), get("/_design/peek/_view/all?include_docs=true"),
		post("/_design/peek/_view/all", `{"keys":[`+keys+`]}`),
		post("/_design/peek/_view/all/queries", `{"queries":[{"include_docs":true}]}`),
		get("/_partition/p/_all_docs?include_docs=true"), post("/_partition/p/_find", `{"selector":{}}`),
	)
	return rows
}

// Response is a server's answer to a Request.
type Response struct {
	Status int
	Header http.Header
	Body   string
}

// Do sends req to the server at base (http://host:port) as user:pass.
// Feeds that do not end are read for at most a few seconds: what came by
// then is the answer.
func Do(base, user, pass string, req Request) (Response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, req.Method, base+req.Path, strings.NewReader(req.Body))
	if err != nil {
		return Response{}, err
	}
	hr.SetBasicAuth(user, pass)
	for k, v := range req.Header {
		hr.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body) // a deadline ends an endless feed
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: string(b)}, nil
}

// Secrets are the strings an answer must not hold: the credentials in a
// doc and, for each doc, its stored revision and that revision's hash
// (which _revisions shows without its generation).
func Secrets(credentials []string, docs []Doc) []string {
	s := append([]string(nil), credentials...)
	for _, d := range docs {
		_, hash, _ := strings.Cut(d.Rev, "-")
		s = append(s, d.Rev, hash)
	}
	return s
}

// Leaks returns the secrets resp shows, in its body or headers.
func Leaks(resp Response, secrets []string) []string {
	var found []string
	for _, s := range secrets {
		if strings.Contains(resp.Body, s) {
			found = append(found, s+" (body)")
		}
		for k, vs := range resp.Header {
			for _, v := range vs {
				if strings.Contains(v, s) {
					found = append(found, s+" (header "+k+")")
				}
			}
		}
	}
	return found
}

// CredentialDoc returns a replication doc (between dbs on the server at
// hostport) whose endpoints hold every kind of credential CouchDB hides
// from non-owners, and those credentials.
func CredentialDoc(hostport string) (doc string, credentials []string) {
	doc = fmt.Sprintf(`{"source":{"url":"http://u1:secret1@%[1]s/src","headers":{"Authorization":"Basic c2VjcmV0Mg=="},"auth":{"basic":{"username":"u2","password":"secret2"}}},"target":{"url":"http://u3:secret3@%[1]s/tgt","headers":{"X-Token":"secret5"}},"source_proxy":"http://pu:secret4@127.0.0.1:1"}`, hostport)
	return doc, []string{"secret1", "secret2", "secret3", "secret4", "secret5", "c2VjcmV0Mg"}
}

// PlainDoc returns a replication doc with no credentials: its stored
// revision is still not for non-owners to see.
func PlainDoc(hostport string) string {
	return fmt.Sprintf(`{"source":"http://%[1]s/src","target":"http://%[1]s/tgt"}`, hostport)
}

// Check sends every row to the server at base as user:pass and fails t
// for each answer that shows a secret; it returns how many rows were
// answered with a success and how many were refused or failed.
func Check(t testing.TB, base, user, pass string, rows []Request, secrets []string) (answered, refused int) {
	t.Helper()
	for _, row := range rows {
		resp, err := Do(base, user, pass, row)
		if err != nil {
			t.Errorf("%s: %v", row, err)
			continue
		}
		// A revision the request names is not learned from the answer.
		var unknown []string
		for _, s := range secrets {
			if !strings.Contains(row.Path, s) && !strings.Contains(row.Body, s) {
				unknown = append(unknown, s)
			}
		}
		if leaks := Leaks(resp, unknown); len(leaks) > 0 {
			t.Errorf("%s: %d shows %s: %s", row, resp.Status, strings.Join(leaks, ", "), resp.Body)
		}
		if resp.Status/100 == 2 {
			answered++
		} else {
			refused++
		}
	}
	return answered, refused
}
