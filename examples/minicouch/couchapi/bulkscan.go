package couchapi

import (
	"bytes"
	"strings"

	"github.com/couchepi/couchepi/internal/jsonscan"
)

// splitBulkDocs finds the docs array and new_edits of a _bulk_docs body that
// is valid JSON, without decoding the documents: the docs returned share
// raw's memory. ok is false for any body the common shape does not cover
// (not an object, docs not an array, new_edits not a boolean or null, keys
// that only differ in case from docs/new_edits, repeated keys); the caller
// then decodes it with encoding/json for the exact errors.
func splitBulkDocs(raw []byte) (docs [][]byte, newEdits *bool, ok bool) {
	i := jsonscan.SkipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return nil, nil, false
	}
	i = jsonscan.SkipSpace(raw, i+1)
	seenDocs, seenNewEdits := false, false
	for i < len(raw) && raw[i] == '"' {
		ke := jsonscan.SkipString(raw, i)
		key := raw[i+1 : ke-1]
		i = jsonscan.SkipSpace(raw, ke)
		i = jsonscan.SkipSpace(raw, i+1) // ':'
		ve := jsonscan.SkipValue(raw, i)
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
		i = jsonscan.SkipSpace(raw, ve)
		if i < len(raw) && raw[i] == ',' {
			i = jsonscan.SkipSpace(raw, i+1)
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
	for i := jsonscan.SkipSpace(arr, 1); i < len(arr) && arr[i] != ']'; {
		e := jsonscan.SkipValue(arr, i)
		out = append(out, arr[i:e])
		i = jsonscan.SkipSpace(arr, e)
		if i < len(arr) && arr[i] == ',' {
			i = jsonscan.SkipSpace(arr, i+1)
		}
	}
	return out
}
