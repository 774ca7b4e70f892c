package parse

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
)

// member is one name/value pair of a JSON object, value kept raw.
type member struct {
	Key   string
	Value json.RawMessage
}

// objectMembers splits a JSON object into its members in document order.
// It fails when raw is not exactly one JSON object.
func objectMembers(raw []byte) ([]member, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	t, err := d.Token()
	if err != nil {
		return nil, err
	}
	if t != json.Delim('{') {
		return nil, errNotObject
	}
	var ms []member
	for d.More() {
		kt, err := d.Token()
		if err != nil {
			return nil, err
		}
		k, ok := kt.(string)
		if !ok {
			return nil, errNotObject
		}
		var v json.RawMessage
		if err := d.Decode(&v); err != nil {
			return nil, err
		}
		ms = append(ms, member{Key: k, Value: v})
	}
	if _, err := d.Token(); err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errTrailing
	}
	return ms, nil
}

var (
	errNotObject = errors.New("not a JSON object")
	errTrailing  = errors.New("trailing data after JSON value")
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
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	v, err := decodeValue(d)
	if err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errTrailing
	}
	return v, nil
}

func decodeValue(d *json.Decoder) (any, error) {
	t, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch v := t.(type) {
	case json.Delim:
		switch v {
		case '{':
			o := object{}
			for d.More() {
				kt, err := d.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				val, err := decodeValue(d)
				if err != nil {
					return nil, err
				}
				o = append(o, field{Key: k, Value: val})
			}
			if _, err := d.Token(); err != nil {
				return nil, err
			}
			return o, nil
		case '[':
			a := []any{}
			for d.More() {
				val, err := decodeValue(d)
				if err != nil {
					return nil, err
				}
				a = append(a, val)
			}
			if _, err := d.Token(); err != nil {
				return nil, err
			}
			return a, nil
		}
		return nil, errors.New("unexpected delimiter")
	default:
		return v, nil // nil, bool, string, json.Number
	}
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
