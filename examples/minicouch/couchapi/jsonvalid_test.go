package couchapi

import (
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
