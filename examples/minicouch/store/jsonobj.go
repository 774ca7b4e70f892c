package store

import (
	"bytes"
	"encoding/json"
	"errors"
)

// errNotObject is returned by eachMember for JSON that is not an object.
var errNotObject = errors.New("not a JSON object")

// eachMember calls fn for each top-level member of the JSON object obj, in
// document order, with the decoded key, the raw key (quoted) and the raw
// value. obj must be valid JSON (checked by the caller with json.Valid).
func eachMember(obj []byte, fn func(key string, rawKey, val []byte) error) error {
	i := skipWS(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return errNotObject
	}
	i = skipWS(obj, i+1)
	if i < len(obj) && obj[i] == '}' {
		return nil
	}
	for i < len(obj) {
		ks := i
		ke := skipString(obj, i)
		rawKey := obj[ks:ke]
		key, err := decodeKey(rawKey)
		if err != nil {
			return err
		}
		i = skipWS(obj, ke)
		i = skipWS(obj, i+1) // ':'
		vs := i
		ve := skipValue(obj, i)
		if err := fn(key, rawKey, obj[vs:ve]); err != nil {
			return err
		}
		i = skipWS(obj, ve)
		if i >= len(obj) || obj[i] == '}' {
			return nil
		}
		i = skipWS(obj, i+1) // ','
	}
	return nil
}

func decodeKey(raw []byte) (string, error) {
	for _, c := range raw[1 : len(raw)-1] {
		if c == '\\' {
			var s string
			err := json.Unmarshal(raw, &s)
			return s, err
		}
	}
	return string(raw[1 : len(raw)-1]), nil
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i] ('"'),
// or len(b) when it is not terminated. A quote ends the string unless an
// odd number of backslashes precede it.
func skipString(b []byte, i int) int {
	start := i + 1
	i = start
	for {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return len(b)
		}
		i += j
		k := i
		for k > start && b[k-1] == '\\' {
			k--
		}
		if (i-k)%2 == 0 {
			return i + 1
		}
		i++
	}
}

// compactValid returns the valid JSON value b without insignificant
// whitespace: b itself when it has none (the common case for bodies other
// programs generate), else a compacted copy.
func compactValid(b []byte) []byte {
	var out []byte
	last := 0
	for i := 0; i < len(b); {
		switch b[i] {
		case '"':
			i = skipString(b, i)
		case ' ', '\t', '\n', '\r':
			if out == nil {
				out = make([]byte, 0, len(b))
			}
			out = append(out, b[last:i]...)
			i++
			last = i
		default:
			i++
		}
	}
	if out == nil {
		return b
	}
	return append(out, b[last:]...)
}

// skipValue returns the index after the JSON value starting at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	default:
		for i < len(b) {
			switch b[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
			i++
		}
		return i
	}
}
