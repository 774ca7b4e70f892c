package parse

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/couchepi/couchepi/internal/jsonobj"
	"github.com/couchepi/couchepi/internal/jsonscan"
)

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
		return nil, jsonobj.Invalid(raw)
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
			key := jsonobj.Unquote(b[i:kEnd])
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
		return jsonobj.Unquote(b[i:end]), end
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
		b.Write(jsonobj.AppendString(nil, t))
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
			b.Write(jsonobj.AppendString(nil, f.Key))
			b.WriteByte(':')
			encodeOrdered(b, f.Value)
		}
		b.WriteByte('}')
	}
}
