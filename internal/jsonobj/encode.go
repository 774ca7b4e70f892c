package jsonobj

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// Marshal encodes v as compact JSON without HTML escaping: CouchDB writes
// <, > and & as they are (encoding/json would write \u003c and so on).
func Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// AppendString appends s as a JSON string, escaped as Marshal escapes it.
func AppendString(b []byte, s string) []byte {
	plain := utf8.ValidString(s)
	for i := 0; plain && i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c == 0xE2 {
			plain = false // 0xE2 may start U+2028/U+2029, which Marshal escapes
		}
	}
	if plain {
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	enc, _ := Marshal(s) // a string always encodes
	return append(b, enc...)
}

// Builder writes a JSON object member by member, in the order added; its
// zero value is an empty object ready to use.
type Builder struct{ buf []byte }

// Add appends a member whose value is v encoded by Marshal; a value that
// cannot be encoded, a nil pointer and an empty json.RawMessage are written
// as null; other json.RawMessage values are copied compacted.
func (o *Builder) Add(key string, v any) *Builder {
	if r, ok := v.(json.RawMessage); ok && len(r) == 0 {
		v = nil
	}
	if len(o.buf) == 0 {
		o.buf = append(o.buf, '{')
	} else {
		o.buf = append(o.buf, ',')
	}
	o.buf = AppendString(o.buf, key)
	o.buf = append(o.buf, ':')
	enc, err := Marshal(v)
	if err != nil {
		enc = []byte("null")
	}
	o.buf = append(o.buf, enc...)
	return o
}

// Raw returns the object built so far.
func (o *Builder) Raw() json.RawMessage {
	if len(o.buf) == 0 {
		return json.RawMessage("{}")
	}
	out := make([]byte, len(o.buf), len(o.buf)+1)
	copy(out, o.buf)
	return append(out, '}')
}
