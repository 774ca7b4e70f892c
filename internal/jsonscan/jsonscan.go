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
// len(b) when it is not terminated. A quote ends the string unless an odd
// number of backslashes precede it.
func SkipString(b []byte, i int) int {
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

// SkipValue returns the index after the JSON value starting at b[i].
func SkipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return SkipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = SkipString(b, i)
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
