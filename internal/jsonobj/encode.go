package jsonobj

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// CouchDB's encoder (jiffy) writes text as UTF-8 and escapes only what
// JSON requires: the quote, the backslash and control characters (\b \f
// \n \r \t in their short forms, others as \u00XX). Marshal and
// AppendString write exactly that, so a string is written the same way
// whichever of them writes it and whatever CouchDB would write; in
// particular <, > and & stay as they are, and so do U+2028 and U+2029,
// which encoding/json escapes for JavaScript's sake. Invalid UTF-8
// becomes U+FFFD, as with jiffy's force_utf8.

// Marshal encodes v as compact JSON the way CouchDB writes it (see
// above). json.RawMessage values in v are copied compacted.
func Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return unescapeRunes(bytes.TrimSuffix(b.Bytes(), []byte("\n"))), nil
}

// unescapeRunes writes the escapes \u2028, \u2029 and \ufffd, which
// encoding/json writes whatever its options, as the characters they
// stand for. An escape is a backslash after an even number of them: in
// `\\u2028` the text "u2028" follows an escaped backslash.
func unescapeRunes(b []byte) []byte {
	if bytes.Index(b, []byte(`\u`)) < 0 {
		return b
	}
	out := b[:0] // writes never pass reads: each escape shrinks to 3 bytes
	for i := 0; i < len(b); {
		if b[i] != '\\' {
			out = append(out, b[i])
			i++
			continue
		}
		if i+1 < len(b) && b[i+1] == 'u' && i+6 <= len(b) {
			switch string(b[i+2 : i+6]) {
			case "2028":
				out, i = append(out, "\u2028"...), i+6
				continue
			case "2029":
				out, i = append(out, "\u2029"...), i+6
				continue
			case "fffd":
				out, i = append(out, "\ufffd"...), i+6
				continue
			}
		}
		out = append(out, b[i]) // the backslash and what it escapes
		if i+1 < len(b) {
			out = append(out, b[i+1])
		}
		i += 2
	}
	return out
}

const hexDigits = "0123456789abcdef"

// AppendString appends s to b as a JSON string, written as Marshal writes
// it; it allocates nothing but b's growth.
func AppendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r != utf8.RuneError || size != 1 {
				i += size
				continue
			}
			b = append(b, s[start:i]...)
			b = append(b, "\ufffd"...)
			i++
			start = i
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		i++
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// Builder writes a JSON object member by member, in the order added; its
// zero value is an empty object ready to use.
type Builder struct{ buf []byte }

// Add appends a member whose value is v encoded by Marshal; a value that
// cannot be encoded, a nil pointer and an empty json.RawMessage are written
// as null; other json.RawMessage values are copied compacted.
func (o *Builder) Add(key string, v any) *Builder {
	if r, ok := v.(json.RawMessage); ok && len(r) == 0 {
		v = nil
	}
	if len(o.buf) == 0 {
		o.buf = append(o.buf, '{')
	} else {
		o.buf = append(o.buf, ',')
	}
	o.buf = AppendString(o.buf, key)
	o.buf = append(o.buf, ':')
	enc, err := Marshal(v)
	if err != nil {
		enc = []byte("null")
	}
	o.buf = append(o.buf, enc...)
	return o
}

// Raw returns the object built so far.
func (o *Builder) Raw() json.RawMessage {
	if len(o.buf) == 0 {
		return json.RawMessage("{}")
	}
	out := make([]byte, len(o.buf), len(o.buf)+1)
	copy(out, o.buf)
	return append(out, '}')
}
