package jsonscan

import (
	"encoding/json"
	"testing"
)

func TestSkipValue(t *testing.T) {
	tests := []struct {
		in   string
		want string // the value SkipValue finds at index 0
	}{
		{`"abc",1`, `"abc"`},
		{`"a\"b"]`, `"a\"b"`},
		{`"a\\"x`, `"a\\"`},
		{`"a\\\"b"}`, `"a\\\"b"`},
		{`{"a":[1,{"b":"}"}]},2`, `{"a":[1,{"b":"}"}]}`},
		{`[[],[[]]] `, `[[],[[]]]`},
		{`123.5e+3,`, `123.5e+3`},
		{`true}`, `true`},
		{`null`, `null`},
		{`"unterminated`, `"unterminated`},
	}
	for _, tt := range tests {
		if got := tt.in[:SkipValue([]byte(tt.in), 0)]; got != tt.want {
			t.Errorf("SkipValue(%q) took %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestSkipSpace(t *testing.T) {
	for in, want := range map[string]int{"": 0, "x": 0, " \t\r\nx": 4, "   ": 3} {
		if got := SkipSpace([]byte(in), 0); got != want {
			t.Errorf("SkipSpace(%q) = %d, want %d", in, got, want)
		}
	}
}

// FuzzSkipValue checks SkipValue against encoding/json on valid input: the
// value it delimits is exactly the first value a json.Decoder reads.
func FuzzSkipValue(f *testing.F) {
	for _, s := range []string{`{"a":"\\\""}`, `[1,"]",{}]`, `"x"`, `-0.5e7`, `{"_id":"a","b":[true,null]}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := []byte(s)
		if !json.Valid(b) {
			SkipValue(b, SkipSpace(b, 0)) // must not panic
			return
		}
		i := SkipSpace(b, 0)
		end := SkipValue(b, i)
		if !json.Valid(b[i:end]) {
			t.Fatalf("SkipValue(%q) delimited %q, not a JSON value", s, b[i:end])
		}
		if rest := SkipSpace(b, end); rest != len(b) {
			t.Fatalf("SkipValue(%q) stopped at %d, trailing %q", s, end, b[end:])
		}
	})
}
