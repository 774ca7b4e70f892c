package parse

import (
	"crypto/md5"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"

	"github.com/couchepi/couchepi/internal/jsonobj"
	"github.com/couchepi/couchepi/internal/selector"
)

// ReplicationID computes CouchDB 3.x's version-4 replication id of rep:
// md5 of the Erlang term [ServerUUID, SrcInfo, TgtInfo | FilterParts]
// (plus <<"winning_revs_only">> when set), with the "+continuous" and
// "+create_target" extensions. serverUUID is the server's `[couchdb] uuid`.
// filterCode is the JavaScript source of a "ddoc/name" filter as stored in
// the design doc (`filters.<name>`); it is trimmed as CouchDB trims it (see
// trimFilterCode), so passing already-trimmed code gives the same id. It is
// ignored for other filter types. A `since_seq` is appended last, as
// CouchDB 3.5.2 does (3.5.0 left it out, so two replications differing only
// in since_seq shared a checkpoint).
func ReplicationID(rep *Rep, serverUUID, filterCode string) RepID {
	return RepID{Base: baseID(rep, serverUUID, filterCode), Ext: idExt(rep)}
}

// baseID hashes the id parts; uuid is a string (binary) or an etfCharList.
func baseID(rep *Rep, uuid any, filterCode string) string {
	parts := []any{uuid, endpointInfo(rep.Source), endpointInfo(rep.Target)}
	parts = append(parts, filterParts(rep, trimFilterCode(filterCode), false)...)
	if rep.WinningRevsOnly {
		parts = append(parts, "winning_revs_only")
	}
	return md5Hex(termToBinary(appendSinceSeq(parts, rep)))
}

// appendSinceSeq appends the since_seq value as CouchDB 3.5.2 does: the
// JSON value as jiffy decodes it (integer, binary, ejson object…).
func appendSinceSeq(parts []any, rep *Rep) []any {
	if len(rep.SinceSeq) == 0 {
		return parts
	}
	v, err := jsonobj.DecodeOrdered(rep.SinceSeq)
	if err != nil {
		return append(parts, string(rep.SinceSeq))
	}
	return append(parts, v)
}

func idExt(rep *Rep) string {
	ext := ""
	if rep.Continuous {
		ext += "+continuous"
	}
	if rep.CreateTarget {
		ext += "+create_target"
	}
	return ext
}

func md5Hex(b []byte) string {
	sum := md5.Sum(b)
	return hex.EncodeToString(sum[:])
}

// PersistentJobID is the job id of a replication defined by a document:
// "<replicator db instance uuid>|<doc id>".
func PersistentJobID(dbUUID, docID string) string { return dbUUID + "|" + docID }

// TransientJobID is the job id of a POST /_replicate replication, computed
// without network access in CouchDB 4.x's shape: md5 hex of
// [ServerUUID, SrcInfo, TgtInfo, UserName|null, Ext | FilterParts], where a
// "ddoc/name" filter contributes [<<"_design/ddoc">>, <<"name">>,
// QueryParams] instead of its code. The same body posted by two users gives
// two jobs. The id only has to be stable within couchepi; it is not
// compared with ids computed by CouchDB.
func TransientJobID(rep *Rep, serverUUID string) string {
	var user any
	if rep.UserCtx.Name != "" {
		user = rep.UserCtx.Name
	}
	parts := []any{serverUUID, endpointInfo(rep.Source), endpointInfo(rep.Target), user, idExt(rep)}
	parts = append(parts, filterParts(rep, "", true)...)
	if rep.WinningRevsOnly {
		parts = append(parts, "winning_revs_only")
	}
	return md5Hex(termToBinary(appendSinceSeq(parts, rep)))
}

// endpointInfo is the id's endpoint tuple
// {remote, User, Host, Port, Path, Headers, undefined}.
func endpointInfo(e Endpoint) etfTuple {
	var user any = etfAtom("undefined")
	if e.Auth != nil {
		user = etfCharList(e.Auth.Username)
	}
	host, port, path, ok := hostPortPath(e.URL)
	var portTerm any = etfAtom("default")
	var hostTerm any = etfCharList(host)
	var pathTerm any = etfCharList(path)
	if !ok {
		// Unparseable URLs do not reach here through the parser; mirror
		// CouchDB's tolerance ({undefined, Url, undefined, undefined}).
		hostTerm, portTerm, pathTerm = etfCharList(e.URL), etfAtom("undefined"), etfAtom("undefined")
	} else {
		scheme := strings.ToLower(e.URL[:strings.Index(e.URL, "://")])
		n, err := strconv.Atoi(port)
		if port == "" || err != nil {
			n = 80
			if scheme == "https" {
				n = 443
			}
		}
		if !(scheme == "http" && (n == 80 || n == 5984)) && !(scheme == "https" && n == 443) {
			portTerm = n
		}
	}
	return etfTuple{etfAtom("remote"), user, hostTerm, portTerm, pathTerm, idHeaders(e.Headers), etfAtom("undefined")}
}

// idHeaders is the sorted list of {Name, Value} char-list pairs of the
// user's headers, minus CouchDB's two default headers (basic auth is
// already gone from Endpoint.Headers).
func idHeaders(h map[string]string) []any {
	names := make([]string, 0, len(h))
	for k, v := range h {
		if (k == "Accept" && v == "application/json") ||
			(k == "User-Agent" && strings.HasPrefix(v, "CouchDB-Replicator/")) {
			continue
		}
		names = append(names, k)
	}
	slices.Sort(names)
	out := make([]any, len(names))
	for i, k := range names {
		out[i] = etfTuple{etfCharList(k), etfCharList(h[k])}
	}
	return out
}

// filterParts are the id parts describing what is replicated.
func filterParts(rep *Rep, code string, transient bool) []any {
	switch {
	case rep.DocIDs != nil:
		return []any{slices.Clone(rep.DocIDs)}
	case rep.Selector != nil:
		sel, err := selector.Normalize(rep.Selector)
		if err != nil {
			sel, _ = jsonobj.DecodeOrdered(rep.Selector)
			return []any{sel}
		}
		return []any{selector.Sort(sel)}
	case rep.Filter == "":
		return nil
	}
	qp := any(jsonobj.Ordered{})
	if len(rep.QueryParams) > 0 {
		if v, err := jsonobj.DecodeOrdered(rep.QueryParams); err == nil {
			qp = v
		}
	}
	if strings.HasPrefix(rep.Filter, "_") {
		return []any{rep.Filter, qp}
	}
	if transient {
		ddoc, name, _ := FilterDDoc(rep.Filter)
		return []any{ddoc, name, qp}
	}
	return []any{code, qp}
}

// trimFilterCode trims a filter function's source exactly as CouchDB does
// before hashing it (re:replace(Code, "^ *(.*?) *$", "\\1")): leading and
// trailing spaces (only U+0020) are removed when the code is a single line
// (a final newline is kept); code spanning several lines is left as is.
func trimFilterCode(code string) string {
	body, nl := code, ""
	if strings.HasSuffix(body, "\n") {
		body, nl = body[:len(body)-1], "\n"
	}
	if strings.Contains(body, "\n") {
		return code
	}
	return strings.Trim(body, " ") + nl
}
