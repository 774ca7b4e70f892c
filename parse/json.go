package parse

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// jsonKind is the type of a raw JSON value, judged by its first byte.
type jsonKind int

const (
	kindInvalid jsonKind = iota
	kindNull
	kindBool
	kindNumber
	kindString
	kindArray
	kindObject
)

// kindOf classifies a raw JSON value (already known to be well-formed).
func kindOf(raw json.RawMessage) jsonKind {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return kindInvalid
	}
	switch c := raw[0]; {
	case c == 'n':
		return kindNull
	case c == 't' || c == 'f':
		return kindBool
	case c == '"':
		return kindString
	case c == '[':
		return kindArray
	case c == '{':
		return kindObject
	case c == '-' || (c >= '0' && c <= '9'):
		return kindNumber
	}
	return kindInvalid
}

// rawBool decodes a JSON boolean.
func rawBool(raw json.RawMessage) (bool, bool) {
	switch string(bytes.TrimSpace(raw)) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

// rawString decodes a JSON string.
func rawString(raw json.RawMessage) (string, bool) {
	if kindOf(raw) != kindString {
		return "", false
	}
	raw = bytes.TrimSpace(raw)
	if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) && len(raw) >= 2 && raw[len(raw)-1] == '"' {
		return string(raw[1 : len(raw)-1]), true
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// rawInt decodes an integer given as a JSON integer or as a string of
// decimal digits with an optional sign ("4"), as CouchDB's to_integer does.
func rawInt(raw json.RawMessage) (int, bool) {
	switch kindOf(raw) {
	case kindNumber:
		n, err := strconv.Atoi(string(bytes.TrimSpace(raw)))
		return n, err == nil
	case kindString:
		s, _ := rawString(raw)
		n, err := strconv.Atoi(s)
		return n, err == nil
	}
	return 0, false
}

// compact returns raw without insignificant whitespace and with <, > and &
// escaped, exactly as json.Marshal writes a json.RawMessage, so values
// stored in a Rep survive a JSON round trip byte for byte.
func compact(raw json.RawMessage) json.RawMessage {
	b, err := json.Marshal(raw)
	if err != nil {
		return append(json.RawMessage(nil), raw...)
	}
	return b
}
