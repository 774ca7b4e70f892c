package jsonobj

import (
	"encoding/json"

	"github.com/couchepi/couchepi/internal/jsonscan"
)

// A decoded JSON value, as CouchDB's jiffy decodes one where the order of
// members matters (replication ids hash it, selectors are normalised in
// it): nil, bool, string, json.Number (the number's text), []any, or
// Ordered.

// Ordered is a decoded JSON object: its members in document order, a
// repeated name kept at each place.
type Ordered []OrderedMember

// OrderedMember is one member of an Ordered object.
type OrderedMember struct {
	Key   string
	Value any
}

// DecodeOrdered decodes one JSON value, objects as Ordered and numbers as
// json.Number.
func DecodeOrdered(raw []byte) (any, error) {
	if !json.Valid(raw) {
		return nil, Invalid(raw)
	}
	v, _ := scanOrdered(raw, jsonscan.SkipSpace(raw, 0))
	return v, nil
}

// scanOrdered decodes the value at i of valid JSON, returning it and the
// index just past it.
func scanOrdered(b []byte, i int) (any, int) {
	switch b[i] {
	case '{':
		o := Ordered{}
		i = jsonscan.SkipSpace(b, i+1)
		if b[i] == '}' {
			return o, i + 1
		}
		for {
			i = jsonscan.SkipSpace(b, i)
			kEnd := jsonscan.SkipValue(b, i)
			key := Unquote(b[i:kEnd])
			i = jsonscan.SkipSpace(b, jsonscan.SkipSpace(b, kEnd)+1)
			v, end := scanOrdered(b, i)
			o = append(o, OrderedMember{Key: key, Value: v})
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
		return Unquote(b[i:end]), end
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

// AppendOrdered appends the decoded value v to b as compact JSON, strings
// written as AppendString writes them.
func AppendOrdered(b []byte, v any) []byte {
	switch t := v.(type) {
	case nil:
		return append(b, "null"...)
	case bool:
		if t {
			return append(b, "true"...)
		}
		return append(b, "false"...)
	case string:
		return AppendString(b, t)
	case json.Number:
		return append(b, t...)
	case []any:
		b = append(b, '[')
		for i, e := range t {
			if i > 0 {
				b = append(b, ',')
			}
			b = AppendOrdered(b, e)
		}
		return append(b, ']')
	case Ordered:
		b = append(b, '{')
		for i, m := range t {
			if i > 0 {
				b = append(b, ',')
			}
			b = AppendString(b, m.Key)
			b = append(b, ':')
			b = AppendOrdered(b, m.Value)
		}
		return append(b, '}')
	}
	return append(b, "null"...)
}
