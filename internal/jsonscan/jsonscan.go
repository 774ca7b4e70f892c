// Package jsonscan walks JSON text that is already known to be valid,
// without decoding it: it finds where whitespace, strings and values end, so
// minicouch can split request bodies and the replicator can read a few
// members of a stored record while keeping the rest as raw bytes. Given
// invalid JSON the Skip functions do not fail; they return some index in
// [i, len(b)].
package jsonscan

import (
	"bytes"
	"encoding/json"
	"errors"
)

// SkipSpace returns the index of the first byte at or after b[i] that is not
// JSON whitespace.
func SkipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// SkipString returns the index after the string starting at b[i] ('"'), or
// len(b) when it is not terminated.
func SkipString(b []byte, i int) int {
	end, _ := StringEnd(b, i)
	return end
}

// StringEnd returns the index after the string starting at b[i] ('"') and
// whether the string is terminated (when not, the index is len(b)). A quote
// ends the string unless an odd number of backslashes precede it.
func StringEnd(b []byte, i int) (int, bool) {
	start := i + 1
	i = start
	for {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return len(b), false
		}
		i += j
		k := i
		for k > start && b[k-1] == '\\' {
			k--
		}
		if (i-k)%2 == 0 {
			return i + 1, true
		}
		i++
	}
}

// SkipValue returns the index after the JSON value starting at b[i].
func SkipValue(b []byte, i int) int {
	end, _ := ValueEnd(b, i)
	return end
}

// ValueEnd returns the index after the JSON value starting at b[i] and
// whether the value ends: a terminated string, an object or array whose
// brackets balance, or a non-empty scalar. It finds bounds; it does not
// validate what lies between them.
func ValueEnd(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return i, false
	}
	switch b[i] {
	case '"':
		return StringEnd(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				end, ok := StringEnd(b, i)
				if !ok {
					return end, false
				}
				i = end
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1, true
				}
			}
			i++
		}
		return i, false
	default:
		start := i
		for i < len(b) {
			switch b[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i, i > start
			}
			i++
		}
		return i, i > start
	}
}

// ErrNotObject is returned by Members for JSON that is not an object.
var ErrNotObject = errors.New("not a JSON object")

// Members calls fn for each top-level member of the JSON object obj, in
// document order, with the raw key (quoted, undecoded) and the raw value,
// and stops at the first error fn returns. obj should be valid JSON; for
// invalid JSON Members may call fn with odd slices of obj or return
// ErrNotObject, but never reads outside obj.
func Members(obj []byte, fn func(rawKey, val []byte) error) error {
	i := SkipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return ErrNotObject
	}
	i = SkipSpace(obj, i+1)
	if i < len(obj) && obj[i] == '}' {
		return nil
	}
	for i < len(obj) && obj[i] == '"' {
		ke := SkipString(obj, i)
		colon := SkipSpace(obj, ke)
		if colon >= len(obj) || obj[colon] != ':' {
			return ErrNotObject
		}
		vs := SkipSpace(obj, colon+1)
		ve := SkipValue(obj, vs)
		if err := fn(obj[i:ke], obj[vs:ve]); err != nil {
			return err
		}
		i = SkipSpace(obj, ve)
		if i < len(obj) && obj[i] == '}' {
			return nil
		}
		if i >= len(obj) || obj[i] != ',' {
			return ErrNotObject
		}
		i = SkipSpace(obj, i+1)
	}
	return ErrNotObject
}

// ErrNotArray is returned by Elements for JSON that is not an array.
var ErrNotArray = errors.New("not a JSON array")

// Elements calls fn for each element of the JSON array arr, in order, with
// its raw value, and stops at the first error fn returns. arr should be
// valid JSON (as Members, it never reads outside it).
func Elements(arr []byte, fn func(val []byte) error) error {
	i := SkipSpace(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return ErrNotArray
	}
	i = SkipSpace(arr, i+1)
	if i < len(arr) && arr[i] == ']' {
		return nil
	}
	for i < len(arr) {
		ve := SkipValue(arr, i)
		if ve <= i {
			return ErrNotArray
		}
		if err := fn(arr[i:ve]); err != nil {
			return err
		}
		i = SkipSpace(arr, ve)
		if i < len(arr) && arr[i] == ']' {
			return nil
		}
		if i >= len(arr) || arr[i] != ',' {
			return ErrNotArray
		}
		i = SkipSpace(arr, i+1)
	}
	return ErrNotArray
}

// Unquote decodes the raw JSON string raw (quotes included), copying its
// bytes unless it has escapes, which take encoding/json's slow path. raw
// must be valid UTF-8 (invalid bytes are kept, not replaced by U+FFFD as
// encoding/json would).
func Unquote(raw []byte) (string, error) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", errors.New("not a JSON string")
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1]), nil
	}
	var s string
	err := json.Unmarshal(raw, &s)
	return s, err
}

// MaxDepth is how deeply encoding/json (and every JSON reader of this
// module) lets objects and arrays nest: deeper text is not valid JSON to it.
const MaxDepth = 10000

// TooDeep reports whether objects and arrays in b, counted outside
// strings, nest deeper than MaxDepth at some point: it tells why a text a
// JSON reader refused was refused, so the answer can say so. b need not be
// valid JSON.
func TooDeep(b []byte) bool {
	depth := 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			i = SkipString(b, i) - 1
		case '{', '[':
			depth++
			if depth > MaxDepth {
				return true
			}
		case '}', ']':
			depth--
		}
	}
	return false
}
