package store

import "github.com/couchepi/couchepi/internal/jsonscan"

// eachMember calls fn for each top-level member of the JSON object obj, in
// document order, with the decoded key, the raw key (quoted) and the raw
// value. obj must be valid JSON (checked by the caller with json.Valid).
func eachMember(obj []byte, fn func(key string, rawKey, val []byte) error) error {
	return jsonscan.Members(obj, func(rawKey, val []byte) error {
		key, err := jsonscan.Unquote(rawKey)
		if err != nil {
			return err
		}
		return fn(key, rawKey, val)
	})
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
