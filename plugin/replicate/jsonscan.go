package replicate

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"

	"github.com/couchepi/couchepi/internal/jsonscan"
)

// The replicator passes documents through as raw JSON: it needs a few
// members of the responses around them (_bulk_get's ids and ok/error
// objects) but never the documents' contents. These helpers find the
// bounds of JSON values in one forward pass, without decoding, so a 1 KB
// document costs a scan for its string delimiters instead of encoding/json's
// validating state machine run twice (Decoder, then Unmarshal). The target
// validates every document it is sent. The bounds come from internal/jsonscan;
// what this file adds is failing on input whose structure does not hold,
// since these responses come from another server.

// errMalformed reports JSON whose structure the scanner could not follow.
var errMalformed = errors.New("malformed JSON")

// skipString returns the index after the string that starts at b[i] ('"').
func skipString(b []byte, i int) (int, error) {
	end, ok := jsonscan.StringEnd(b, i)
	if !ok {
		return 0, errMalformed
	}
	return end, nil
}

// skipValue returns the index after the JSON value that starts at b[i].
func skipValue(b []byte, i int) (int, error) {
	end, ok := jsonscan.ValueEnd(b, i)
	if !ok {
		return 0, errMalformed
	}
	return end, nil
}

// members walks the JSON object that starts at b[i] (after whitespace),
// calling fn with each member's decoded key and the index where its value
// starts; fn returns the index after the value (skipValue, or after
// descending into it). members returns the index after the object.
//
// The key is only valid during the call: it is the unquoted bytes of b
// when the key has no escapes (so comparing it, as string(key) == "id",
// allocates nothing), else a decoded copy.
func members(b []byte, i int, fn func(key []byte, v int) (int, error)) (int, error) {
	return rawMembers(b, i, func(raw []byte, v int) (int, error) {
		key := raw[1 : len(raw)-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			s, err := jsonscan.Unquote(raw)
			if err != nil {
				return 0, err
			}
			key = []byte(s)
		}
		return fn(key, v)
	})
}

// rawMembers is members with each key given as its raw JSON string,
// quotes included, undecoded (no allocation per key).
func rawMembers(b []byte, i int, fn func(raw []byte, v int) (int, error)) (int, error) {
	i = jsonscan.SkipSpace(b, i)
	if i >= len(b) || b[i] != '{' {
		return 0, errMalformed
	}
	i = jsonscan.SkipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return 0, errMalformed
		}
		ke, err := skipString(b, i)
		if err != nil {
			return 0, err
		}
		raw := b[i:ke]
		i = jsonscan.SkipSpace(b, ke)
		if i >= len(b) || b[i] != ':' {
			return 0, errMalformed
		}
		if i, err = fn(raw, jsonscan.SkipSpace(b, i+1)); err != nil {
			return 0, err
		}
		i = jsonscan.SkipSpace(b, i)
		if i >= len(b) {
			return 0, errMalformed
		}
		switch b[i] {
		case '}':
			return i + 1, nil
		case ',':
			i = jsonscan.SkipSpace(b, i+1)
		default:
			return 0, errMalformed
		}
	}
}

// elements walks the JSON array that starts at b[i] (after whitespace),
// calling fn with the index where each element starts; fn returns the index
// after the element. elements returns the index after the array.
func elements(b []byte, i int, fn func(v int) (int, error)) (int, error) {
	i = jsonscan.SkipSpace(b, i)
	if i >= len(b) || b[i] != '[' {
		return 0, errMalformed
	}
	i = jsonscan.SkipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, nil
	}
	for {
		var err error
		if i, err = fn(i); err != nil {
			return 0, err
		}
		i = jsonscan.SkipSpace(b, i)
		if i >= len(b) {
			return 0, errMalformed
		}
		switch b[i] {
		case ']':
			return i + 1, nil
		case ',':
			i = jsonscan.SkipSpace(b, i+1)
		default:
			return 0, errMalformed
		}
	}
}

// keyIs reports whether the decoded member name key selects the field
// name, matched as encoding/json matches it: exactly, or else
// case-insensitively (CouchDB sends lower case; the fold keeps the
// scanner's reading of any response the same as encoding/json's).
func keyIs(key []byte, name string) bool {
	return string(key) == name || strings.EqualFold(string(key), name)
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
	// HasAtts reports that OK has a non-empty _attachments object (the
	// doc is then fetched on its own, attachments and all).
	HasAtts bool
}

// scanDoc walks the doc object at b[i] and returns the index after it and
// whether it has a top-level _attachments member whose value is a
// non-empty object. Keys are matched as encoding/json matches a field
// name (case-insensitively); with repeated members any non-empty one
// counts, which at worst sends a doc down the slower per-doc path.
func scanDoc(b []byte, i int) (int, bool, error) {
	atts := false
	end, err := rawMembers(b, i, func(raw []byte, v int) (int, error) {
		if !atts && v < len(b) && b[v] == '{' && isAttachmentsKey(raw) {
			k := jsonscan.SkipSpace(b, v+1)
			atts = k < len(b) && b[k] != '}'
		}
		return skipValue(b, v)
	})
	return end, atts, err
}

// isAttachmentsKey reports whether the raw JSON string raw names
// _attachments, as encoding/json would match it to that field.
func isAttachmentsKey(raw []byte) bool {
	const name = "_attachments"
	if bytes.IndexByte(raw, '\\') < 0 {
		return bytes.EqualFold(raw[1:len(raw)-1], []byte(name))
	}
	key, err := jsonscan.Unquote(raw)
	return err == nil && strings.EqualFold(key, name)
}

// parseBulkGet reads a `_bulk_get` JSON response, each byte once. The docs
// returned share body's memory. Members other than results, id, docs, ok
// and error are skipped, as are non-string ids (they cannot match a request)
// and ok values that are not objects.
func parseBulkGet(body []byte) ([]bulkGetResult, error) {
	var out []bulkGetResult
	doc := func(v int) (int, error) {
		var d bulkGetDoc
		end, err := members(body, v, func(key []byte, v int) (int, error) {
			if keyIs(key, "ok") && v < len(body) && body[v] == '{' {
				end, atts, err := scanDoc(body, v)
				if err != nil {
					return 0, err
				}
				d.OK, d.HasAtts = body[v:end], atts
				return end, nil
			}
			end, err := skipValue(body, v)
			if err != nil {
				return 0, err
			}
			if keyIs(key, "error") {
				d.Error = body[v:end]
			}
			return end, nil
		})
		out[len(out)-1].Docs = append(out[len(out)-1].Docs, d)
		return end, err
	}
	result := func(v int) (int, error) {
		out = append(out, bulkGetResult{})
		return members(body, v, func(key []byte, v int) (int, error) {
			switch {
			case keyIs(key, "id") && v < len(body) && body[v] == '"':
				end, err := skipString(body, v)
				if err != nil {
					return 0, err
				}
				out[len(out)-1].ID, err = jsonscan.Unquote(body[v:end])
				return end, err
			case keyIs(key, "docs"):
				out[len(out)-1].Docs = out[len(out)-1].Docs[:0] // the last member counts
				return elements(body, v, doc)
			}
			return skipValue(body, v)
		})
	}
	end, err := members(body, 0, func(key []byte, v int) (int, error) {
		if !keyIs(key, "results") {
			return skipValue(body, v)
		}
		out = out[:0] // the last of duplicate members counts, as in encoding/json
		return elements(body, v, result)
	})
	if err == nil && jsonscan.SkipSpace(body, end) != len(body) {
		err = errMalformed
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}
