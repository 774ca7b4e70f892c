package replicate

import (
	"bytes"
	"encoding/json"
	"errors"
)

// The replicator passes documents through as raw JSON: it needs a few
// members of the responses around them (_bulk_get's ids and ok/error
// objects) but never the documents' contents. These helpers find the
// bounds of JSON values in one forward pass, without decoding, so a 1 KB
// document costs a scan for its string delimiters instead of encoding/json's
// validating state machine run twice (Decoder, then Unmarshal). The target
// validates every document it is sent.

// errMalformed reports JSON whose structure the scanner could not follow.
var errMalformed = errors.New("malformed JSON")

// skipWS returns the index of the first non-whitespace byte at or after i.
func skipWS(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the index after the string that starts at b[i] ('"').
func skipString(b []byte, i int) (int, error) {
	i++
	for {
		j := bytes.IndexAny(b[i:], "\"\\")
		if j < 0 {
			return 0, errMalformed
		}
		i += j
		if b[i] == '"' {
			return i + 1, nil
		}
		i += 2 // backslash and the escaped byte
		if i > len(b) {
			return 0, errMalformed
		}
	}
}

// skipValue returns the index after the JSON value that starts at b[i].
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errMalformed
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				var err error
				if i, err = skipString(b, i); err != nil {
					return 0, err
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1, nil
				}
			}
			i++
		}
		return 0, errMalformed
	default:
		start := i
		for i < len(b) {
			switch b[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				if i == start {
					return 0, errMalformed
				}
				return i, nil
			}
			i++
		}
		if i == start {
			return 0, errMalformed
		}
		return i, nil
	}
}

// eachMember calls fn with the decoded key and the raw value of each member
// of the JSON object b, in order.
func eachMember(b []byte, fn func(key string, val []byte) error) error {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return errMalformed
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return errMalformed
		}
		ke, err := skipString(b, i)
		if err != nil {
			return err
		}
		key, err := decodeKey(b[i:ke])
		if err != nil {
			return err
		}
		i = skipWS(b, ke)
		if i >= len(b) || b[i] != ':' {
			return errMalformed
		}
		vs := skipWS(b, i+1)
		ve, err := skipValue(b, vs)
		if err != nil {
			return err
		}
		if err := fn(key, b[vs:ve]); err != nil {
			return err
		}
		i = skipWS(b, ve)
		if i >= len(b) {
			return errMalformed
		}
		switch b[i] {
		case '}':
			return nil
		case ',':
			i = skipWS(b, i+1)
		default:
			return errMalformed
		}
	}
}

// eachElement calls fn with each raw element of the JSON array b, in order.
func eachElement(b []byte, fn func(val []byte) error) error {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '[' {
		return errMalformed
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == ']' {
		return nil
	}
	for {
		ve, err := skipValue(b, i)
		if err != nil {
			return err
		}
		if err := fn(b[i:ve]); err != nil {
			return err
		}
		i = skipWS(b, ve)
		if i >= len(b) {
			return errMalformed
		}
		switch b[i] {
		case ']':
			return nil
		case ',':
			i = skipWS(b, i+1)
		default:
			return errMalformed
		}
	}
}

// decodeKey unquotes a raw JSON string, taking the slow path only for escapes.
func decodeKey(raw []byte) (string, error) {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1]), nil
	}
	var s string
	err := json.Unmarshal(raw, &s)
	return s, err
}

// bulkGetResult is one entry of a `_bulk_get` response: the id asked for
// and, per revision, the doc (ok) or the error object, both raw JSON.
type bulkGetResult struct {
	ID   string
	Docs []bulkGetDoc
}

// bulkGetDoc is one element of a `_bulk_get` result's docs list.
type bulkGetDoc struct {
	OK    json.RawMessage
	Error json.RawMessage
}

// parseBulkGet reads a `_bulk_get` JSON response. The docs returned share
// body's memory. Members other than results, id, docs, ok and error are
// ignored, as are non-string ids (they cannot match a request).
func parseBulkGet(body []byte) ([]bulkGetResult, error) {
	var out []bulkGetResult
	err := eachMember(body, func(key string, val []byte) error {
		if key != "results" {
			return nil
		}
		out = out[:0] // the last of duplicate members counts, as in encoding/json
		return eachElement(val, func(elem []byte) error {
			var r bulkGetResult
			err := eachMember(elem, func(key string, val []byte) error {
				switch key {
				case "id":
					if val[0] == '"' {
						id, err := decodeKey(val)
						if err != nil {
							return err
						}
						r.ID = id
					}
				case "docs":
					return eachElement(val, func(d []byte) error {
						var bd bulkGetDoc
						err := eachMember(d, func(key string, val []byte) error {
							switch key {
							case "ok":
								if val[0] == '{' {
									bd.OK = val
								}
							case "error":
								bd.Error = val
							}
							return nil
						})
						r.Docs = append(r.Docs, bd)
						return err
					})
				}
				return nil
			})
			out = append(out, r)
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
