// Package jsonobj reads and writes JSON objects with their members kept in
// document order, and encodes JSON the way CouchDB writes it (compact;
// <, >, &, U+2028 and U+2029 as they are): every JSON answer minicouch
// builds, the hooks' error bodies and what the replicator writes into
// documents go through Marshal and AppendString. CouchDB checks and
// prints members in order, so code that must match its reasons or bytes
// works on an Object rather than a Go map.
package jsonobj

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/couchepi/couchepi/internal/jsonscan"
)

// Member is one name/value pair of a JSON object; Value is raw JSON.
type Member struct {
	Key   string
	Value json.RawMessage
}

// Object is the members of a JSON object in document order. A name may
// repeat, as JSON allows; Get returns the first, as CouchDB's property-list
// lookups do.
type Object []Member

// Errors returned by Parse. ErrTooDeep's text is what servers answer for
// such a body.
var (
	ErrInvalid   = errors.New("invalid JSON")
	ErrNotObject = errors.New("not a JSON object")
	ErrTooDeep   = fmt.Errorf("JSON nested too deeply: more than %d levels of objects and arrays", jsonscan.MaxDepth)
)

// Parse splits raw, which must be exactly one JSON object, into its members.
// Values alias raw.
func Parse(raw []byte) (Object, error) {
	if !json.Valid(raw) {
		return nil, Invalid(raw)
	}
	return ParseValid(raw)
}

// Invalid returns why raw, which a JSON reader refused, is not JSON:
// ErrTooDeep when it nests deeper than readers go, else ErrInvalid.
func Invalid(raw []byte) error {
	if jsonscan.TooDeep(raw) {
		return ErrTooDeep
	}
	return ErrInvalid
}

// ParseValid is Parse for input already known to be valid JSON: it skips
// the validation pass and only checks that raw is an object.
func ParseValid(raw []byte) (Object, error) {
	ms := Object{}
	err := jsonscan.Members(raw, func(key, val []byte) error {
		ms = append(ms, Member{Key: Unquote(key), Value: val[:len(val):len(val)]})
		return nil
	})
	if err != nil {
		return nil, ErrNotObject
	}
	return ms, nil
}

// Unquote decodes the JSON string token tok (quotes included) as
// encoding/json would, invalid UTF-8 becoming U+FFFD; tok must be valid.
func Unquote(tok []byte) string {
	if bytes.IndexByte(tok, '\\') < 0 && utf8.Valid(tok) {
		return string(tok[1 : len(tok)-1])
	}
	var s string
	_ = json.Unmarshal(tok, &s)
	return s
}

// Get returns the value of the first member named key.
func (o Object) Get(key string) (json.RawMessage, bool) {
	for _, m := range o {
		if m.Key == key {
			return m.Value, true
		}
	}
	return nil, false
}

// Set gives key the value v: the first member named key keeps its place
// and later ones are dropped; a new key is appended. o is not modified.
func (o Object) Set(key string, v json.RawMessage) Object {
	out := make(Object, 0, len(o)+1)
	found := false
	for _, m := range o {
		if m.Key == key {
			if found {
				continue
			}
			m.Value, found = v, true
		}
		out = append(out, m)
	}
	if !found {
		out = append(out, Member{Key: key, Value: v})
	}
	return out
}

// Delete returns o without any member named key. o is not modified.
func (o Object) Delete(key string) Object {
	out := make(Object, 0, len(o))
	for _, m := range o {
		if m.Key != key {
			out = append(out, m)
		}
	}
	return out
}

// Bytes encodes o as a compact JSON object, values as they are.
func (o Object) Bytes() []byte {
	n := 2
	for _, m := range o {
		n += len(m.Key) + len(m.Value) + 4
	}
	b := make([]byte, 0, n)
	b = append(b, '{')
	for i, m := range o {
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendString(b, m.Key)
		b = append(b, ':')
		b = append(b, m.Value...)
	}
	return append(b, '}')
}
