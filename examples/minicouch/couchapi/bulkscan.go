package couchapi

import (
	"bytes"
	"strings"
)

// splitBulkDocs finds the docs array and new_edits of a _bulk_docs body that
// is valid JSON, without decoding the documents: the docs returned share
// raw's memory. ok is false for any body the common shape does not cover
// (not an object, docs not an array, new_edits not a boolean or null, keys
// that only differ in case from docs/new_edits, repeated keys); the caller
// then decodes it with encoding/json for the exact errors.
func splitBulkDocs(raw []byte) (docs [][]byte, newEdits *bool, ok bool) {
	i := jsonWS(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return nil, nil, false
	}
	i = jsonWS(raw, i+1)
	seenDocs, seenNewEdits := false, false
	for i < len(raw) && raw[i] == '"' {
		ke := jsonString(raw, i)
		key := raw[i+1 : ke-1]
		i = jsonWS(raw, ke)
		i = jsonWS(raw, i+1) // ':'
		ve := jsonValue(raw, i)
		val := raw[i:ve]
		switch {
		case string(key) == "docs":
			if seenDocs || val[0] != '[' {
				return nil, nil, false
			}
			seenDocs = true
			docs = jsonElements(val)
		case string(key) == "new_edits":
			if seenNewEdits {
				return nil, nil, false
			}
			seenNewEdits = true
			switch string(val) {
			case "true", "false":
				b := val[0] == 't'
				newEdits = &b
			case "null":
			default:
				return nil, nil, false
			}
		case bytes.IndexByte(key, '\\') >= 0 || strings.EqualFold(string(key), "docs") || strings.EqualFold(string(key), "new_edits"):
			return nil, nil, false
		}
		i = jsonWS(raw, ve)
		if i < len(raw) && raw[i] == ',' {
			i = jsonWS(raw, i+1)
		}
	}
	if !seenDocs {
		return nil, nil, false
	}
	return docs, newEdits, true
}

// jsonElements splits the valid JSON array arr into its raw elements.
func jsonElements(arr []byte) [][]byte {
	out := [][]byte{}
	for i := jsonWS(arr, 1); i < len(arr) && arr[i] != ']'; {
		e := jsonValue(arr, i)
		out = append(out, arr[i:e])
		i = jsonWS(arr, e)
		if i < len(arr) && arr[i] == ',' {
			i = jsonWS(arr, i+1)
		}
	}
	return out
}

// jsonWS skips JSON whitespace from b[i].
func jsonWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// jsonString returns the index after the string starting at b[i] ('"'), or
// len(b) if it does not end: a quote ends it unless an odd number of
// backslashes precede it.
func jsonString(b []byte, i int) int {
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

// jsonValue returns the index after the valid JSON value starting at b[i].
func jsonValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return jsonString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = jsonString(b, i)
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
