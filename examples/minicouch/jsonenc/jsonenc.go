// Package jsonenc encodes JSON the way CouchDB writes it: compact, with
// <, > and & as they are (Go's encoding/json escapes them as \u003c,
// \u003e and \u0026 by default) and non-ASCII text as UTF-8. Every JSON
// answer minicouch builds goes through these helpers, so its bytes match
// CouchDB's.
package jsonenc

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// Marshal encodes v as compact JSON without HTML escaping. json.RawMessage
// values inside v are copied compacted, not re-escaped.
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

const hexDigits = "0123456789abcdef"

// AppendString appends s to buf as a JSON string: quote, backslash and
// control characters escaped (\b \f \n \r \t in their short forms), every
// other character as UTF-8; invalid UTF-8 becomes U+FFFD.
func AppendString(buf []byte, s string) []byte {
	buf = append(buf, '"')
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
			buf = append(buf, s[start:i]...)
			buf = append(buf, "\ufffd"...)
			i++
			start = i
			continue
		}
		buf = append(buf, s[start:i]...)
		switch c {
		case '"', '\\':
			buf = append(buf, '\\', c)
		case '\b':
			buf = append(buf, '\\', 'b')
		case '\f':
			buf = append(buf, '\\', 'f')
		case '\n':
			buf = append(buf, '\\', 'n')
		case '\r':
			buf = append(buf, '\\', 'r')
		case '\t':
			buf = append(buf, '\\', 't')
		default:
			buf = append(buf, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		i++
		start = i
	}
	buf = append(buf, s[start:]...)
	return append(buf, '"')
}
