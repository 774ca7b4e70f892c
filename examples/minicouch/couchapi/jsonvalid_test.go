package couchapi

import (
	"encoding/binary"
	"encoding/json"
	"strings"
	"testing"
)

func TestJSONValid(t *testing.T) {
	tests := []string{
		``, ` `, `{}`, ` {"a" : [1, -0.5e+3, 0, true, false, null, "x\"\\\/\b\f\n\r\t\u00e9"]} `,
		`{"a":1,}`, `[1,]`, `{"a"}`, `{"a":}`, `{1:2}`, `"\x"`, `"\u12"`, `"\u12g4"`, "\"a\tb\"", "\"\x01\"",
		`01`, `-`, `1.`, `.5`, `1e`, `1e+`, `-01`, `+1`, `tru`, `nul`, `truex`, `[1 2]`, `{"a":1 "b":2}`,
		`{} {}`, `[`, `]`, `"abc`, `"abc\"`, `[[[]]]`, `{"a":{"b":{"c":[{}]}}}`, "\"\xff\xfe\"", `123`, `-0`, `1E5`,
		strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
		strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
		strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000),
		strings.Repeat(`{"a":`, 10001) + "1" + strings.Repeat("}", 10001),
	}
	for _, s := range tests {
		if got, want := jsonValid([]byte(s)), json.Valid([]byte(s)); got != want {
			name := s
			if len(name) > 40 {
				name = name[:40] + "…"
			}
			t.Errorf("jsonValid(%q) = %v, encoding/json says %v", name, got, want)
		}
	}
}

// TestHasStringSpecial checks the word-at-a-time test against a byte loop
// for every byte value at every position of a word, on backgrounds of
// bytes next to the special ones and with the high bit set (where a
// borrow between bytes would show).
func TestHasStringSpecial(t *testing.T) {
	for _, bg := range []byte{'x', 0x20, 0x21, 0x23, 0x5b, 0x5d, 0x7f, 0x80, 0xa2, 0xdc, 0xff} {
		for c := 0; c < 256; c++ {
			for pos := 0; pos < 8; pos++ {
				var w [8]byte
				for i := range w {
					w[i] = bg
				}
				w[pos] = byte(c)
				want := false
				for _, x := range w {
					want = want || stringSpecial[x]
				}
				if got := hasStringSpecial(binary.LittleEndian.Uint64(w[:])); got != want {
					t.Fatalf("hasStringSpecial(% x) = %v, want %v", w, got, want)
				}
			}
		}
	}
}

// TestJSONValidLongStrings checks strings long enough for the
// word-at-a-time scan with a quote, escape, control character or invalid
// escape at every offset.
func TestJSONValidLongStrings(t *testing.T) {
	for _, special := range []string{`\"`, `\\`, `\n`, `\u00e9`, "\x01", "\t", `\x`, `\u12`, "\xff", `"`} {
		for pos := 0; pos < 24; pos++ {
			s := `{"k":"` + strings.Repeat("a", pos) + special + strings.Repeat("b", 24-pos) + `"}`
			if got, want := jsonValid([]byte(s)), json.Valid([]byte(s)); got != want {
				t.Errorf("jsonValid(%q) = %v, encoding/json says %v", s, got, want)
			}
		}
	}
}

// FuzzJSONValid checks jsonValid against encoding/json.Valid.
func FuzzJSONValid(f *testing.F) {
	for _, s := range []string{`{"a":[1,2.5e-3,"x\u0041"]}`, `[true,false,null]`, `"\\"`, `{"a":{}}`, `-0.0E+1`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := jsonValid(b), json.Valid(b); got != want {
			t.Fatalf("jsonValid(%q) = %v, encoding/json says %v", b, got, want)
		}
	})
}

// BenchmarkJSONValid compares jsonValid with encoding/json.Valid on a
// _bulk_docs body of 500 ~1 KB docs as the replicator sends it.
func BenchmarkJSONValid(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"new_edits":false,"docs":[`)
	for i := 0; i < 500; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"_id":"d0000001","_rev":"1-0123456789abcdef0123456789abcdef","n":1,"pad":"` + strings.Repeat("x", 900) +
			`","tags":["bench","replicate"],"_revisions":{"start":1,"ids":["0123456789abcdef0123456789abcdef"]}}`)
	}
	sb.WriteString(`]}`)
	body := []byte(sb.String())
	for _, tc := range []struct {
		name  string
		valid func([]byte) bool
	}{{"couchapi", jsonValid}, {"encoding_json", json.Valid}} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for i := 0; i < b.N; i++ {
				if !tc.valid(body) {
					b.Fatal("invalid")
				}
			}
		})
	}
}
