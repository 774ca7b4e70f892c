package parse

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"unicode/utf8"

	"github.com/couchepi/couchepi/internal/jsonscan"
)

// member is one name/value pair of a JSON object, value kept raw.
type member struct {
	Key   string
	Value json.RawMessage
}

// objectMembers splits a JSON object into its members in document order.
// It fails when raw is not exactly one JSON object.
func objectMembers(raw []byte) ([]member, error) {
	if !json.Valid(raw) {
		return nil, errInvalid
	}
	var ms []member
	err := jsonscan.Members(raw, func(key, val []byte) error {
		ms = append(ms, member{Key: unquoteKey(key), Value: val[:len(val):len(val)]})
		return nil
	})
	if err != nil {
		return nil, errNotObject
	}
	return ms, nil
}

// unquoteKey decodes a JSON string token.
func unquoteKey(tok []byte) string {
	if bytes.IndexByte(tok, '\\') < 0 && utf8.Valid(tok) {
		return string(tok[1 : len(tok)-1])
	}
	var s string
	_ = json.Unmarshal(tok, &s)
	return s
}

var (
	errInvalid   = errors.New("invalid JSON")
	errNotObject = errors.New("not a JSON object")
)

// firstMember returns the value of the first member named key, as CouchDB's
// property-list lookups do when a name repeats.
func firstMember(ms []member, key string) (json.RawMessage, bool) {
	for _, m := range ms {
		if m.Key == key {
			return m.Value, true
		}
	}
	return nil, false
}

// encodeObject writes members back as a compact JSON object.
func encodeObject(ms []member) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range ms {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(jsonString(m.Key))
		b.WriteByte(':')
		b.Write(m.Value)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// jsonString encodes s as a JSON string without HTML escaping.
func jsonString(s string) []byte {
	plain := utf8.ValidString(s)
	for i := 0; plain && i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c == 0xE2 {
			plain = false // 0xE2 may start U+2028/U+2029, which are escaped
		}
	}
	if plain {
		out := make([]byte, 0, len(s)+2)
		out = append(out, '"')
		out = append(out, s...)
		return append(out, '"')
	}
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	_ = e.Encode(s) // encoding a string cannot fail
	return bytes.TrimRight(b.Bytes(), "\n")
}

// jsonKind is the type of a raw JSON value, judged by its first byte.
type jsonKind int

const (
	kindInvalid jsonKind = iota
	kindNull
	kindBool
	kindNumber
	kindString
	kindArray
	kindObject
)

// kindOf classifies a raw JSON value (already known to be well-formed).
func kindOf(raw json.RawMessage) jsonKind {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return kindInvalid
	}
	switch c := raw[0]; {
	case c == 'n':
		return kindNull
	case c == 't' || c == 'f':
		return kindBool
	case c == '"':
		return kindString
	case c == '[':
		return kindArray
	case c == '{':
		return kindObject
	case c == '-' || (c >= '0' && c <= '9'):
		return kindNumber
	}
	return kindInvalid
}

// rawBool decodes a JSON boolean.
func rawBool(raw json.RawMessage) (bool, bool) {
	switch string(bytes.TrimSpace(raw)) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

// rawString decodes a JSON string.
func rawString(raw json.RawMessage) (string, bool) {
	if kindOf(raw) != kindString {
		return "", false
	}
	raw = bytes.TrimSpace(raw)
	if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) && len(raw) >= 2 && raw[len(raw)-1] == '"' {
		return string(raw[1 : len(raw)-1]), true
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// rawInt decodes an integer given as a JSON integer or as a string of
// decimal digits with an optional sign ("4"), as CouchDB's to_integer does.
func rawInt(raw json.RawMessage) (int, bool) {
	switch kindOf(raw) {
	case kindNumber:
		n, err := strconv.Atoi(string(bytes.TrimSpace(raw)))
		return n, err == nil
	case kindString:
		s, _ := rawString(raw)
		n, err := strconv.Atoi(s)
		return n, err == nil
	}
	return 0, false
}

// compact returns raw without insignificant whitespace and with <, > and &
// escaped, exactly as json.Marshal writes a json.RawMessage, so values
// stored in a Rep survive a JSON round trip byte for byte.
func compact(raw json.RawMessage) json.RawMessage {
	b, err := json.Marshal(raw)
	if err != nil {
		return append(json.RawMessage(nil), raw...)
	}
	return b
}

// Ordered JSON values, used where CouchDB's term shape or key order matters
// (replication ids, selector normalisation). A value is one of: nil (null),
// bool, string, json.Number, []any, or object.

// object is a JSON object with its members in order.
type object []field

// field is one member of an ordered object.
type field struct {
	Key   string
	Value any
}

// decodeOrdered decodes one JSON value keeping object member order and
// numbers as json.Number.
func decodeOrdered(raw []byte) (any, error) {
	if !json.Valid(raw) {
		return nil, errInvalid
	}
	v, _ := scanOrdered(raw, jsonscan.SkipSpace(raw, 0))
	return v, nil
}

// scanOrdered decodes the value at i of valid JSON, returning it and the
// index just past it.
func scanOrdered(b []byte, i int) (any, int) {
	switch b[i] {
	case '{':
		o := object{}
		i = jsonscan.SkipSpace(b, i+1)
		if b[i] == '}' {
			return o, i + 1
		}
		for {
			i = jsonscan.SkipSpace(b, i)
			kEnd := jsonscan.SkipValue(b, i)
			key := unquoteKey(b[i:kEnd])
			i = jsonscan.SkipSpace(b, jsonscan.SkipSpace(b, kEnd)+1)
			v, end := scanOrdered(b, i)
			o = append(o, field{Key: key, Value: v})
			i = jsonscan.SkipSpace(b, end)
			if b[i] == '}' {
				return o, i + 1
			}
			i++
		}
	case '[':
		a := []any{}
		i = jsonscan.SkipSpace(b, i+1)
		if b[i] == ']' {
			return a, i + 1
		}
		for {
			v, end := scanOrdered(b, jsonscan.SkipSpace(b, i))
			a = append(a, v)
			i = jsonscan.SkipSpace(b, end)
			if b[i] == ']' {
				return a, i + 1
			}
			i++
		}
	case '"':
		end := jsonscan.SkipValue(b, i)
		return unquoteKey(b[i:end]), end
	case 't':
		return true, i + 4
	case 'f':
		return false, i + 5
	case 'n':
		return nil, i + 4
	}
	end := jsonscan.SkipValue(b, i)
	return json.Number(b[i:end]), end
}

// encodeOrdered writes an ordered value as compact JSON.
func encodeOrdered(b *bytes.Buffer, v any) {
	switch t := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if t {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case string:
		b.Write(jsonString(t))
	case json.Number:
		b.WriteString(t.String())
	case []any:
		b.WriteByte('[')
		for i, e := range t {
			if i > 0 {
				b.WriteByte(',')
			}
			encodeOrdered(b, e)
		}
		b.WriteByte(']')
	case object:
		b.WriteByte('{')
		for i, f := range t {
			if i > 0 {
				b.WriteByte(',')
			}
			b.Write(jsonString(f.Key))
			b.WriteByte(':')
			encodeOrdered(b, f.Value)
		}
		b.WriteByte('}')
	}
}
