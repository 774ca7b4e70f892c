package couchapi

import (
	"encoding/binary"

	"github.com/couchepi/couchepi/internal/jsonscan"
)

// jsonValid reports whether b is exactly one JSON value (with optional
// surrounding whitespace), accepting what encoding/json.Valid accepts
// (including its nesting limit of 10000) but several times faster on
// string-heavy documents: string contents are checked with a table lookup
// per byte instead of a state-machine call. UTF-8 is checked separately.
func jsonValid(b []byte) bool {
	i := jsonscan.SkipSpace(b, 0)
	i, ok := validValue(b, i, 0)
	return ok && jsonscan.SkipSpace(b, i) == len(b)
}

// maxJSONDepth is encoding/json's nesting limit.
const maxJSONDepth = 10000

// jsonValidDepth is jsonValid with objects and arrays nesting at most
// max (<= maxJSONDepth) levels.
func jsonValidDepth(b []byte, max int) bool {
	i := jsonscan.SkipSpace(b, 0)
	i, ok := validValue(b, i, maxJSONDepth-max)
	return ok && jsonscan.SkipSpace(b, i) == len(b)
}

// stringSpecial marks the bytes that end a run of plain string contents:
// the quote, the backslash and control characters.
var stringSpecial = func() (t [256]bool) {
	for c := 0; c < 0x20; c++ {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

// Word-at-a-time tests on 8 bytes packed in a uint64 (exact: they never
// miss a byte nor report one that is not there).
const (
	lsbs = 0x0101010101010101 // 0x01 in every byte
	msbs = 0x8080808080808080 // 0x80 in every byte
)

// hasStringSpecial reports whether any byte of v is a stringSpecial one:
// below 0x20, '"' or '\\'.
func hasStringSpecial(v uint64) bool {
	q := v ^ (lsbs * '"')
	bs := v ^ (lsbs * '\\')
	return ((v-lsbs*0x20)&^v|(q-lsbs)&^q|(bs-lsbs)&^bs)&msbs != 0
}

// afterMember checks what follows a member or element at b[i]: ','
// (another follows, next is where it starts) or close (done, next is after
// it); anything else is invalid.
func afterMember(b []byte, i int, close byte) (next int, done, ok bool) {
	i = jsonscan.SkipSpace(b, i)
	if i >= len(b) {
		return i, false, false
	}
	switch b[i] {
	case ',':
		return jsonscan.SkipSpace(b, i+1), false, true
	case close:
		return i + 1, true, true
	}
	return i, false, false
}

// validValue checks the value starting at b[i] and returns the index after it.
func validValue(b []byte, i, depth int) (int, bool) {
	if i >= len(b) {
		return i, false
	}
	switch c := b[i]; {
	case c == '"':
		return validString(b, i)
	case c == '{':
		if depth+1 > maxJSONDepth {
			return i, false
		}
		i = jsonscan.SkipSpace(b, i+1)
		if i < len(b) && b[i] == '}' {
			return i + 1, true
		}
		for {
			if i >= len(b) || b[i] != '"' {
				return i, false
			}
			var ok bool
			if i, ok = validString(b, i); !ok {
				return i, false
			}
			i = jsonscan.SkipSpace(b, i)
			if i >= len(b) || b[i] != ':' {
				return i, false
			}
			if i, ok = validValue(b, jsonscan.SkipSpace(b, i+1), depth+1); !ok {
				return i, false
			}
			var done bool
			if i, done, ok = afterMember(b, i, '}'); !ok || done {
				return i, ok
			}
		}
	case c == '[':
		if depth+1 > maxJSONDepth {
			return i, false
		}
		i = jsonscan.SkipSpace(b, i+1)
		if i < len(b) && b[i] == ']' {
			return i + 1, true
		}
		for {
			var ok bool
			if i, ok = validValue(b, i, depth+1); !ok {
				return i, false
			}
			var done bool
			if i, done, ok = afterMember(b, i, ']'); !ok || done {
				return i, ok
			}
		}
	case c == 't':
		return validLiteral(b, i, "true")
	case c == 'f':
		return validLiteral(b, i, "false")
	case c == 'n':
		return validLiteral(b, i, "null")
	case c == '-' || c >= '0' && c <= '9':
		return validNumber(b, i)
	}
	return i, false
}

func validLiteral(b []byte, i int, lit string) (int, bool) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return i, false
	}
	return i + len(lit), true
}

// validString checks the string starting at b[i] ('"').
func validString(b []byte, i int) (int, bool) {
	i++
	for {
		// Eight bytes at a time while none of them is special (most of
		// a document's bytes are plain string contents), then byte by byte
		// up to the special one.
		for i+8 <= len(b) && !hasStringSpecial(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		for i < len(b) && !stringSpecial[b[i]] {
			i++
		}
		if i >= len(b) {
			return i, false
		}
		switch b[i] {
		case '"':
			return i + 1, true
		case '\\':
			if i+1 >= len(b) {
				return i, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if len(b)-i < 6 {
					return i, false
				}
				for _, h := range b[i+2 : i+6] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return i, false
					}
				}
				i += 6
			default:
				return i, false
			}
		default: // control character
			return i, false
		}
	}
}

// validNumber checks -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? at b[i].
func validNumber(b []byte, i int) (int, bool) {
	digits := func(i int) (int, bool) {
		s := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i, i > s
	}
	if b[i] == '-' {
		i++
	}
	if i >= len(b) {
		return i, false
	}
	if b[i] == '0' {
		i++
	} else {
		var ok bool
		if i, ok = digits(i); !ok {
			return i, false
		}
	}
	if i < len(b) && b[i] == '.' {
		var ok bool
		if i, ok = digits(i + 1); !ok {
			return i, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		var ok bool
		if i, ok = digits(i); !ok {
			return i, false
		}
	}
	return i, true
}
