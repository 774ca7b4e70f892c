package parse

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
)

// Clone returns a deep copy of r.
func (r *Rep) Clone() *Rep {
	c := *r
	c.Source = r.Source.clone()
	c.Target = r.Target.clone()
	c.CreateTargetParams = slices.Clone(r.CreateTargetParams)
	c.DocIDs = slices.Clone(r.DocIDs)
	c.QueryParams = slices.Clone(r.QueryParams)
	c.Selector = slices.Clone(r.Selector)
	c.SinceSeq = slices.Clone(r.SinceSeq)
	c.UserCtx.Roles = slices.Clone(r.UserCtx.Roles)
	return &c
}

func (e Endpoint) clone() Endpoint {
	c := e
	c.Headers = maps.Clone(e.Headers)
	if e.Auth != nil {
		a := *e.Auth
		c.Auth = &a
	}
	c.AuthOther = slices.Clone(e.AuthOther)
	return c
}

// Equal reports whether r and o describe the same replication: same source,
// target and options. DB, DocID, Owner and UserCtx are ignored. JSON-valued
// fields compare by value (whitespace-insensitive); QueryParams also by key
// order, since that order is part of the replication id. A doc update whose
// parsed Rep is Equal to the running one is a no-op.
func (r *Rep) Equal(o *Rep) bool {
	if r == nil || o == nil {
		return r == o
	}
	a, b := *r, *o
	a.DB, b.DB = "", ""
	a.DocID, b.DocID = "", ""
	a.Owner, b.Owner = "", ""
	a.UserCtx, b.UserCtx = UserCtx{}, UserCtx{}
	if !a.Source.equal(b.Source) || !a.Target.equal(b.Target) {
		return false
	}
	if !jsonEqual(a.CreateTargetParams, b.CreateTargetParams, "{}") ||
		!jsonEqualOrdered(a.QueryParams, b.QueryParams, "{}") ||
		!jsonEqual(a.Selector, b.Selector, "") ||
		!jsonEqual(a.SinceSeq, b.SinceSeq, "") {
		return false
	}
	a.Source, b.Source = Endpoint{}, Endpoint{}
	a.Target, b.Target = Endpoint{}, Endpoint{}
	a.CreateTargetParams, b.CreateTargetParams = nil, nil
	a.QueryParams, b.QueryParams = nil, nil
	a.Selector, b.Selector = nil, nil
	a.SinceSeq, b.SinceSeq = nil, nil
	if !slices.Equal(a.DocIDs, b.DocIDs) {
		return false
	}
	a.DocIDs, b.DocIDs = nil, nil
	// What is left are scalar fields: compare them through their encoding.
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

func (e Endpoint) equal(o Endpoint) bool {
	if e.URL != o.URL || e.Proxy != o.Proxy {
		return false
	}
	if len(e.Headers) != len(o.Headers) || !maps.Equal(e.Headers, o.Headers) {
		return false
	}
	if (e.Auth == nil) != (o.Auth == nil) || (e.Auth != nil && *e.Auth != *o.Auth) {
		return false
	}
	return jsonEqual(e.AuthOther, o.AuthOther, "")
}

// jsonEqual compares two JSON values semantically; empty stands for the
// value an absent (nil) field means.
func jsonEqual(a, b json.RawMessage, empty string) bool {
	if len(a) == 0 {
		a = json.RawMessage(empty)
	}
	if len(b) == 0 {
		b = json.RawMessage(empty)
	}
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

// jsonEqualOrdered compares two JSON values keeping object key order.
func jsonEqualOrdered(a, b json.RawMessage, empty string) bool {
	if len(a) == 0 {
		a = json.RawMessage(empty)
	}
	if len(b) == 0 {
		b = json.RawMessage(empty)
	}
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}
