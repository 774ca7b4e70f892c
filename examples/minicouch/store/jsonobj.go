package store

import (
	"encoding/json"
	"errors"

	"github.com/couchepi/couchepi/examples/minicouch/jsonscan"
)

// errNotObject is returned by eachMember for JSON that is not an object.
var errNotObject = errors.New("not a JSON object")

// eachMember calls fn for each top-level member of the JSON object obj, in
// document order, with the decoded key, the raw key (quoted) and the raw
// value. obj must be valid JSON (checked by the caller with json.Valid).
func eachMember(obj []byte, fn func(key string, rawKey, val []byte) error) error {
	return eachRawMember(obj, func(rawKey, val []byte) error {
		key, err := decodeKey(rawKey)
		if err != nil {
			return err
		}
		return fn(key, rawKey, val)
	})
}

// eachRawMember is eachMember without decoding the keys: fn gets the raw
// key (quoted) and the raw value.
func eachRawMember(obj []byte, fn func(rawKey, val []byte) error) error {
	i := jsonscan.SkipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return errNotObject
	}
	i = jsonscan.SkipSpace(obj, i+1)
	if i < len(obj) && obj[i] == '}' {
		return nil
	}
	for i < len(obj) {
		ks := i
		ke := jsonscan.SkipString(obj, i)
		rawKey := obj[ks:ke]
		i = jsonscan.SkipSpace(obj, ke)
		i = jsonscan.SkipSpace(obj, i+1) // ':'
		vs := i
		ve := jsonscan.SkipValue(obj, i)
		if err := fn(rawKey, obj[vs:ve]); err != nil {
			return err
		}
		i = jsonscan.SkipSpace(obj, ve)
		if i >= len(obj) || obj[i] == '}' {
			return nil
		}
		i = jsonscan.SkipSpace(obj, i+1) // ','
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

// compactValid returns the valid JSON value b without insignificant
// whitespace: b itself when it has none (the common case for bodies other
// programs generate), else a compacted copy.
func compactValid(b []byte) []byte {
	var out []byte
	last := 0
	for i := 0; i < len(b); {
		switch b[i] {
		case '"':
			i = jsonscan.SkipString(b, i)
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
