package jsonenc

import (
	"encoding/json"
	"testing"
)

func TestAppendString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", `""`},
		{"plain", `"plain"`},
		{"<0.1002.0>", `"<0.1002.0>"`},
		{"a&b", `"a&b"`},
		{`q"b\s`, `"q\"b\\s"`},
		{"\b\f\n\r\t", `"\b\f\n\r\t"`},
		{"\x00\x1f", `"\u0000\u001f"`},
		{"é☃😀", `"é☃😀"`},
		{"\u2028", "\"\u2028\""},
		{"bad\xffutf8", "\"bad\ufffdutf8\""},
		{"/", `"/"`},
	} {
		got := string(AppendString([]byte("x"), tc.in))
		if got != "x"+tc.want {
			t.Errorf("AppendString(%q) = %s, want x%s", tc.in, got, tc.want)
		}
		var back string
		if err := json.Unmarshal([]byte(tc.want), &back); err != nil {
			t.Errorf("%s is not valid JSON: %v", tc.want, err)
		}
	}
}

func TestMarshal(t *testing.T) {
	for _, tc := range []struct {
		in   any
		want string
	}{
		{map[string]any{"pid": "<0.1002.0>", "a&b": 1}, `{"a&b":1,"pid":"<0.1002.0>"}`},
		{[]json.RawMessage{json.RawMessage(`{"pid": "<0.1.0>"}`)}, `[{"pid":"<0.1.0>"}]`},
		{"x", `"x"`},
	} {
		got, err := Marshal(tc.in)
		if err != nil || string(got) != tc.want {
			t.Errorf("Marshal(%v) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
	if _, err := Marshal(func() {}); err == nil {
		t.Error("Marshal(func) must fail")
	}
}
