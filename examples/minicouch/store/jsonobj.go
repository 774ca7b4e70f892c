package store

import (
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

// skipString returns the index after the string starting at b[i] ('"').
func skipString(b []byte, i int) int {
	i++
	for i < len(b) {
		switch b[i] {
		case '\\':
			i += 2
		case '"':
			return i + 1
		default:
			i++
		}
	}
	return i
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
