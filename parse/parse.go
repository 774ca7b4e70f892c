package parse

import (
	"encoding/json"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/couchepi/couchepi/internal/jsonobj"
	"github.com/couchepi/couchepi/internal/jsonscan"
	"github.com/couchepi/couchepi/internal/selector"
)

// ReplicationDoc parses a `_replicator` document body into a Rep without
// touching the network. Option defaults come from opts. Bare database names
// are invalid (local endpoints are not supported in documents). Rep.UserCtx
// is the doc's `user_ctx` when it has one, else user; Rep.Owner is the doc's
// `owner` and Rep.DocID its `_id` (the caller sets Rep.DB). The `_local_id`/`replication_id`/`id` and `cancel` fields have no
// meaning in documents and are not interpreted (`cancel` is still
// type-checked). A failure is a *Error whose Reason is CouchDB's text.
func ReplicationDoc(body []byte, user UserCtx, opts Options) (*Rep, error) {
	rep, err := parseRep(body, user, opts, false)
	if err != nil {
		return nil, err
	}
	return rep, nil
}

// ReplicationDocState is ReplicationDoc that also returns the doc's
// `_replication_state` ("" when absent or not a string), read in the same
// pass over the body. A doc in a terminal state ("completed" or "failed") is
// not parsed further: rep and err are nil, as the doc starts no job.
func ReplicationDocState(body []byte, user UserCtx, opts Options) (rep *Rep, state string, err error) {
	ms, jerr := jsonobj.Parse(body)
	if jerr != nil {
		return nil, "", notObject(jerr, false)
	}
	state, _ = stringMember(ms, "_replication_state")
	if state == "completed" || state == "failed" {
		return nil, state, nil
	}
	rep, perr := parseRepObject(ms, user, opts, false)
	if perr != nil {
		return nil, state, perr
	}
	return rep, state, nil
}

// ReplicateRequest parses a `POST /_replicate` body into a Rep without
// touching the network. user is the authenticated HTTP user. A bare
// database name as `source`/`target` (or as an object endpoint's `url`) is
// rewritten to opts.LocalURL + url.PathEscape(name), with opts.LocalHeaders
// (the request's Authorization and Cookie headers) added to that endpoint.
// `{"cancel": true, "replication_id"|"_local_id"|"id": …}` without
// source/target is valid: Rep.Cancel and Rep.ID are set, endpoints empty.
// A failure is a *Error (the caller answers 400 bad_request).
func ReplicateRequest(body []byte, user UserCtx, opts Options) (*Rep, error) {
	rep, err := parseRep(body, user, opts, true)
	if err != nil {
		return nil, err
	}
	return rep, nil
}

// parseRep is the parser shared by documents and _replicate bodies. Checks
// run in CouchDB's order: proxies, then options in document order, then the
// doc_ids/filter/selector exclusion, then source, target and filter names.
func parseRep(body []byte, user UserCtx, opts Options, request bool) (*Rep, *Error) {
	ms, err := jsonobj.Parse(body)
	if err != nil {
		return nil, notObject(err, request)
	}
	return parseRepObject(ms, user, opts, request)
}

// parseRepObject is parseRep on a body already split into its members.
func parseRepObject(ms jsonobj.Object, user UserCtx, opts Options, request bool) (*Rep, *Error) {
	seen := make(map[string]bool, len(ms))
	uniq := ms[:0:0]
	for _, m := range ms {
		if !seen[m.Key] {
			seen[m.Key] = true
			uniq = append(uniq, m)
		}
	}
	ms = uniq

	srcProxy, tgtProxy, perr := parseProxies(ms)
	if perr != nil {
		return nil, perr
	}

	rep := &Rep{
		UseCheckpoints:     opts.UseCheckpoints,
		CheckpointInterval: opts.CheckpointInterval,
		WorkerProcesses:    opts.WorkerProcesses,
		WorkerBatchSize:    opts.WorkerBatchSize,
		HTTPConnections:    opts.HTTPConnections,
		ConnectionTimeout:  opts.ConnectionTimeout,
		RetriesPerRequest:  opts.RetriesPerRequest,
		SocketOptions:      opts.SocketOptions,
		UseBulkGet:         opts.UseBulkGet,
		DocWriteFailure:    docWriteFailure(opts.DocWriteFailure),
		UserCtx:            cloneUser(user),
	}
	var hasDocIDs, hasFilter, hasSelector bool
	var source, target json.RawMessage
	for _, m := range ms {
		var e *Error
		switch m.Key {
		case "source":
			source = m.Value
		case "target":
			target = m.Value
		case "cancel":
			e = setBool(&rep.Cancel, m)
		case "continuous":
			e = setBool(&rep.Continuous, m)
		case "create_target":
			e = setBool(&rep.CreateTarget, m)
		case "winning_revs_only":
			e = setBool(&rep.WinningRevsOnly, m)
		case "use_bulk_get":
			e = setBool(&rep.UseBulkGet, m)
		case "use_checkpoints":
			e = setBool(&rep.UseCheckpoints, m)
		case "checkpoint":
			e = setCheckpoint(&rep.Checkpoint, m)
		case "create_target_params":
			if kindOf(m.Value) != kindObject {
				e = newError(reasonCreateTargetPar)
			} else {
				rep.CreateTargetParams = compact(m.Value)
			}
		case "_local_id", "replication_id", "id":
			if request && rep.ID == "" {
				s, ok := rawString(m.Value)
				if !ok {
					e = newError(reasonIDString(m.Key))
				} else {
					rep.ID = strings.ReplaceAll(s, " ", "+")
				}
			}
		case "doc_ids":
			if kindOf(m.Value) == kindNull {
				continue
			}
			rep.DocIDs, e = parseDocIDs(m.Value)
			hasDocIDs = e == nil
		case "filter":
			s, ok := rawString(m.Value)
			if !ok || s == "" {
				e = newError(reasonFilterString)
			} else {
				rep.Filter, hasFilter = s, true
			}
		case "query_params":
			switch kindOf(m.Value) {
			case kindNull:
			case kindObject:
				rep.QueryParams = compact(m.Value)
			default:
				e = newError(reasonQueryParams)
			}
		case "selector":
			if kindOf(m.Value) != kindObject {
				e = newError(reasonSelectorObject)
			} else {
				rep.Selector, hasSelector = compact(m.Value), true
			}
		case "since_seq":
			if kindOf(m.Value) != kindNull {
				rep.SinceSeq = compact(m.Value)
			}
		case "worker_processes":
			e = setInt(&rep.WorkerProcesses, m, 1)
		case "worker_batch_size":
			e = setInt(&rep.WorkerBatchSize, m, 1)
		case "http_connections":
			e = setInt(&rep.HTTPConnections, m, 1)
		case "connection_timeout":
			e = setInt(&rep.ConnectionTimeout, m, 1)
		case "checkpoint_interval":
			e = setInt(&rep.CheckpointInterval, m, 1)
		case "retries_per_request":
			e = setInt(&rep.RetriesPerRequest, m, 0)
		case "doc_write_failure":
			s, ok := rawString(m.Value)
			if !ok || s != DocWriteFailureCount && s != DocWriteFailureFail {
				e = newError(reasonDocWriteFailure)
			} else {
				rep.DocWriteFailure = docWriteFailure(s)
			}
		case "socket_options":
			s, ok := rawString(m.Value)
			if !ok {
				e = newError(reasonSocketOptions)
			} else {
				rep.SocketOptions = formatSocketOptions(parseSocketOptions(s))
			}
		case "user_ctx":
			if !request {
				var u UserCtx
				if u, e = parseUserCtx(m.Value); e == nil {
					rep.UserCtx = u
				}
			}
		case "owner":
			if !request {
				rep.Owner, _ = rawString(m.Value)
			}
		case "_id":
			if !request {
				rep.DocID, _ = rawString(m.Value)
			}
		}
		if e != nil {
			return nil, e
		}
	}
	if n := btoi(hasDocIDs) + btoi(hasFilter) + btoi(hasSelector); n > 1 {
		return nil, newError(reasonMutuallyExclusive)
	}
	if request && rep.Cancel && rep.ID != "" {
		return rep, nil
	}

	var loc *local
	if request && opts.LocalURL != "" {
		loc = &local{baseURL: opts.LocalURL, headers: opts.LocalHeaders}
	}
	var e *Error
	if rep.Source, e = parseEndpoint("source", source, srcProxy, loc); e != nil {
		return nil, e
	}
	if rep.Target, e = parseEndpoint("target", target, tgtProxy, loc); e != nil {
		return nil, e
	}
	if hasFilter {
		if e = checkFilter(rep); e != nil {
			return nil, e
		}
	}
	if hasSelector {
		if _, err := selector.Normalize(rep.Selector); err != nil {
			return nil, newError(reasonSelector(err.Error()))
		}
	}
	return rep, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// cloneUser copies u, normalising empty roles to nil.
func cloneUser(u UserCtx) UserCtx {
	if len(u.Roles) == 0 {
		return UserCtx{Name: u.Name}
	}
	return UserCtx{Name: u.Name, Roles: slices.Clone(u.Roles)}
}

// parseProxies reads `proxy`, `source_proxy` and `target_proxy`.
func parseProxies(ms jsonobj.Object) (src, tgt string, e *Error) {
	get := func(key string) (string, *Error) {
		raw, ok := ms.Get(key)
		if !ok {
			return "", nil
		}
		s, ok := rawString(raw)
		if !ok {
			return "", newError(reasonInvalidProxy)
		}
		return s, nil
	}
	proxy, e := get("proxy")
	if e != nil {
		return "", "", e
	}
	if src, e = get("source_proxy"); e != nil {
		return "", "", e
	}
	if tgt, e = get("target_proxy"); e != nil {
		return "", "", e
	}
	if proxy != "" {
		if src != "" {
			return "", "", newError(reasonProxyExclusive("source_proxy"))
		}
		if tgt != "" {
			return "", "", newError(reasonProxyExclusive("target_proxy"))
		}
		src, tgt = proxy, proxy
	}
	for _, p := range []string{src, tgt} {
		if p == "" {
			continue
		}
		if r := checkProxyURL(p); r != "" {
			return "", "", newError(r)
		}
	}
	return src, tgt, nil
}

// docWriteFailure normalises a valid `doc_write_failure` value: "count",
// the default, is stored as "", so that spelling it out changes nothing
// (Rep.Equal).
func docWriteFailure(v string) string {
	if v == DocWriteFailureFail {
		return v
	}
	return ""
}

// setBool reads a JSON boolean option.
func setBool(dst *bool, m jsonobj.Member) *Error {
	b, ok := rawBool(m.Value)
	if !ok {
		return newError(reasonBoolean(m.Key))
	}
	*dst = b
	return nil
}

// setCheckpoint reads `checkpoint` (PouchDB's option): "target", or
// "both" or null for the default. PouchDB's false and "source" are
// refused: the first is `use_checkpoints: false`, the second is of no use
// to a replication, which may always write to its target.
func setCheckpoint(dst *string, m jsonobj.Member) *Error {
	if kindOf(m.Value) == kindNull {
		*dst = CheckpointBoth
		return nil
	}
	switch s, _ := rawString(m.Value); {
	case kindOf(m.Value) != kindString:
	case s == "both":
		*dst = CheckpointBoth
		return nil
	case s == CheckpointTarget:
		*dst = CheckpointTarget
		return nil
	}
	return newError(reasonCheckpoint)
}

// setInt reads an integer option (JSON integer or numeric string) that must
// be at least min.
func setInt(dst *int, m jsonobj.Member, min int) *Error {
	n, ok := rawInt(m.Value)
	if !ok {
		return newError(reasonInteger(m.Key))
	}
	if n < min {
		if min == 0 {
			return newError(reasonNonNegative(m.Key))
		}
		return newError(reasonPositive(m.Key))
	}
	*dst = n
	return nil
}

// parseDocIDs reads `doc_ids`: an array of non-empty strings, each
// percent-decoded ("+" decodes to a space, as CouchDB's unquote does),
// then sorted and deduplicated.
func parseDocIDs(raw json.RawMessage) ([]string, *Error) {
	if kindOf(raw) != kindArray {
		return nil, newError(reasonDocIDsArray)
	}
	if !json.Valid(raw) {
		return nil, newError(reasonDocIDsArray)
	}
	// One pass over the valid array: a doc of 100,000 ids is read in
	// milliseconds (decoding it into []json.RawMessage first took a
	// hundred).
	ids := []string{} // not nil: an empty list is not an absent one
	var perr *Error
	err := jsonscan.Elements(raw, func(el []byte) error {
		s, ok := rawString(el)
		if !ok || s == "" {
			perr = newError(reasonDocIDsStrings)
			return perr
		}
		id := unquote(s)
		if !utf8.ValidString(id) {
			perr = newError(reasonDocIDsUTF8)
			return perr
		}
		ids = append(ids, id)
		return nil
	})
	if perr != nil {
		return nil, perr
	}
	if err != nil {
		return nil, newError(reasonDocIDsArray)
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// unquote percent-decodes s; "+" becomes a space and a "%" not followed by
// two hex digits is kept as is.
func unquote(s string) string {
	if !strings.ContainsAny(s, "%+") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '+':
			b.WriteByte(' ')
		case c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// checkFilter validates the filter name: builtins start with "_" ("_view"
// needs query_params.view = "ddoc/view"); others must be "ddoc/name".
func checkFilter(rep *Rep) *Error {
	f := rep.Filter
	if strings.HasPrefix(f, "_") {
		if f == "_view" {
			view := ""
			if len(rep.QueryParams) > 0 {
				if ms, err := jsonobj.Parse(rep.QueryParams); err == nil {
					if v, ok := ms.Get("view"); ok {
						view, _ = rawString(v)
					}
				}
			}
			ddoc, name, ok := strings.Cut(view, "/")
			if !ok || ddoc == "" || name == "" || strings.Contains(name, "/") {
				return newError(reasonViewParam)
			}
		}
		return nil
	}
	ddoc, name, ok := strings.Cut(f, "/")
	if !ok || ddoc == "" || name == "" {
		return newError(reasonFilterName)
	}
	return nil
}

// FilterDDoc splits a user filter "ddoc/name" into the design doc id
// ("_design/ddoc") and the filter name. ok is false for builtin filters
// (leading "_") and for "" .
func FilterDDoc(filter string) (ddocID, name string, ok bool) {
	if filter == "" || strings.HasPrefix(filter, "_") {
		return "", "", false
	}
	ddoc, name, ok := strings.Cut(filter, "/")
	if !ok {
		return "", "", false
	}
	return "_design/" + ddoc, name, true
}

// parseUserCtx reads a doc's `user_ctx` = {"name": string|null, "roles": [string…]}.
func parseUserCtx(raw json.RawMessage) (UserCtx, *Error) {
	if kindOf(raw) != kindObject {
		return UserCtx{}, newError(reasonUserCtxObject)
	}
	ms, err := jsonobj.Parse(raw)
	if err != nil {
		return UserCtx{}, newError(reasonUserCtxObject)
	}
	var u UserCtx
	if v, ok := ms.Get("name"); ok && kindOf(v) != kindNull {
		if u.Name, ok = rawString(v); !ok {
			return UserCtx{}, newError(reasonUserCtxName)
		}
	}
	if v, ok := ms.Get("roles"); ok && kindOf(v) != kindNull {
		var elems []json.RawMessage
		if kindOf(v) != kindArray || json.Unmarshal(v, &elems) != nil {
			return UserCtx{}, newError(reasonUserCtxRoles)
		}
		u.Roles = make([]string, 0, len(elems))
		for _, el := range elems {
			r, ok := rawString(el)
			if !ok {
				return UserCtx{}, newError(reasonUserCtxRoles)
			}
			u.Roles = append(u.Roles, r)
		}
		if len(u.Roles) == 0 {
			u.Roles = nil
		}
	}
	return u, nil
}
