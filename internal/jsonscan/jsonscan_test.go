package jsonscan

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
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
			TooDeep(b)
			return
		}
		if TooDeep(b) {
			t.Fatalf("TooDeep(%q) is true for JSON encoding/json takes", s)
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

// TestTooDeep: TooDeep tells exactly the nesting encoding/json refuses,
// counting no bracket inside a string.
func TestTooDeep(t *testing.T) {
	nest := func(n int, open, close, inner string) string {
		return strings.Repeat(open, n) + inner + strings.Repeat(close, n)
	}
	tests := []struct {
		name string
		in   string
		want bool
	}{
		{"flat", `{"a":[1,2]}`, false},
		{"arrays at the limit", nest(MaxDepth, "[", "]", ""), false},
		{"arrays past the limit", nest(MaxDepth+1, "[", "]", ""), true},
		{"objects past the limit", nest(MaxDepth+1, `{"a":`, "}", "1"), true},
		{"mixed past the limit", `{"s":` + nest(MaxDepth, "[", "]", "") + `}`, true},
		{"past the limit, then broken", nest(MaxDepth+1, "[", "", ""), true},
		{"brackets in strings", `["` + strings.Repeat("[", MaxDepth+1) + `"]`, false},
		{"escaped quote in a string", `["\"` + strings.Repeat("{", MaxDepth+1) + `"]`, false},
		{"broken but shallow", `{"a":[}`, false},
	}
	for _, tt := range tests {
		b := []byte(tt.in)
		if got := TooDeep(b); got != tt.want {
			t.Errorf("%s: TooDeep = %v, want %v", tt.name, got, tt.want)
		}
		if tt.want && json.Valid(b) {
			t.Errorf("%s: encoding/json takes what TooDeep calls too deep", tt.name)
		}
	}
	if !json.Valid([]byte(nest(MaxDepth, "[", "]", ""))) {
		t.Error("encoding/json refuses MaxDepth levels: MaxDepth is not its limit")
	}
}

func TestMembers(t *testing.T) {
	tests := []struct {
		in   string
		want []string // key=value pairs, raw
		err  error
	}{
		{`{}`, nil, nil},
		{` { "a" : 1 , "b":{"c":[1,"}"]} ,"d\"":"x"} `, []string{`"a"=1`, `"b"={"c":[1,"}"]}`, `"d\""="x"`}, nil},
		{`[1]`, nil, ErrNotObject},
		{``, nil, ErrNotObject},
	}
	for _, tt := range tests {
		var got []string
		err := Members([]byte(tt.in), func(k, v []byte) error {
			got = append(got, string(k)+"="+string(v))
			return nil
		})
		if err != tt.err || strings.Join(got, " ") != strings.Join(tt.want, " ") {
			t.Errorf("Members(%q) = %q, %v; want %q, %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestUnquote(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{`"abc"`, "abc", true},
		{`""`, "", true},
		{`"a\"b\u00e9"`, `a"bé`, true},
		{`"a\x"`, "", false},
		{`abc`, "", false},
		{`"`, "", false},
	}
	for _, tt := range tests {
		got, err := Unquote([]byte(tt.in))
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("Unquote(%q) = %q, %v; want %q, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

// FuzzMembers checks Members never reads outside its input and agrees with
// encoding/json about the members of valid objects.
func FuzzMembers(f *testing.F) {
	f.Add([]byte(`{"a":1,"b":{"c":"}"},"a":[2]}`))
	f.Add([]byte(`{"k\u00e9\"":null , "":""}`))
	f.Add([]byte(`{"a":1,`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got := map[string]string{}
		err := Members(b, func(k, v []byte) error {
			key, err := Unquote(k)
			if err != nil {
				return err
			}
			got[key] = string(v)
			return nil
		})
		var want map[string]json.RawMessage
		// encoding/json replaces invalid UTF-8 in keys; Unquote expects
		// valid UTF-8, as the servers check before they scan.
		if !utf8.Valid(b) || json.Unmarshal(b, &want) != nil || want == nil {
			return
		}
		if err != nil {
			t.Fatalf("Members(%q): %v", b, err)
		}
		if len(got) != len(want) {
			t.Fatalf("Members(%q) found %d members, encoding/json %d", b, len(got), len(want))
		}
		for k, v := range want {
			if got[k] != string(v) {
				t.Fatalf("Members(%q)[%q] = %s, encoding/json %s", b, k, got[k], v)
			}
		}
	})
}

func TestValueEnd(t *testing.T) {
	tests := []struct {
		in     string
		end    int
		wantOK bool
	}{
		{`"abc",`, 5, true},
		{`"a\"`, 4, false},
		{`{"a":"}"}x`, 9, true},
		{`{"a":[1,2}`, 10, false},
		{`{"a":"x`, 7, false},
		{`12,`, 2, true},
		{`,`, 0, false},
		{``, 0, false},
	}
	for _, tt := range tests {
		end, ok := ValueEnd([]byte(tt.in), 0)
		if end != tt.end || ok != tt.wantOK {
			t.Errorf("ValueEnd(%q) = %d, %v; want %d, %v", tt.in, end, ok, tt.end, tt.wantOK)
		}
	}
}

func TestElements(t *testing.T) {
	tests := []struct {
		in   string
		want []string
		err  error
	}{
		{`[]`, nil, nil},
		{` [ 1 , "a\"]" ,{"b":[2]}, null ] `, []string{`1`, `"a\"]"`, `{"b":[2]}`, `null`}, nil},
		{`{}`, nil, ErrNotArray},
		{`[1,`, []string{`1`}, ErrNotArray},
		{`[1 2]`, []string{`1`}, ErrNotArray},
	}
	for _, tt := range tests {
		var got []string
		err := Elements([]byte(tt.in), func(v []byte) error { got = append(got, string(v)); return nil })
		if err != tt.err || len(got) != len(tt.want) {
			t.Errorf("%s: %q %v, want %q %v", tt.in, got, err, tt.want, tt.err)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("%s: %q, want %q", tt.in, got, tt.want)
			}
		}
	}
}
