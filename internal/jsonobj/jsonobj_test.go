package jsonobj

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in      string
		want    string // Bytes() of the parsed object
		wantErr error
	}{
		{`{}`, `{}`, nil},
		{` { "a" : 1 , "b":[1, 2] } `, `{"a":1,"b":[1, 2]}`, nil},
		{`{"a":1,"a":2}`, `{"a":1,"a":2}`, nil},
		{`{"\u00e9<":"x"}`, `{"é<":"x"}`, nil},
		{`[1]`, ``, ErrNotObject},
		{`"s"`, ``, ErrNotObject},
		{`{"a":1}x`, ``, ErrInvalid},
		{`{"a":}`, ``, ErrInvalid},
		{``, ``, ErrInvalid},
		{`{"a":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`, ``, ErrTooDeep},
	}
	for _, tt := range tests {
		o, err := Parse([]byte(tt.in))
		if err != tt.wantErr {
			t.Errorf("Parse(%q) error = %v, want %v", tt.in, err, tt.wantErr)
			continue
		}
		if err == nil && string(o.Bytes()) != tt.want {
			t.Errorf("Parse(%q).Bytes() = %s, want %s", tt.in, o.Bytes(), tt.want)
		}
	}
}

func TestGetSetDelete(t *testing.T) {
	o, err := Parse([]byte(`{"t":"x","c":false,"s":1,"c":true}`))
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := o.Get("c"); !ok || string(v) != "false" {
		t.Errorf("Get(c) = %s, %v; want the first, false", v, ok)
	}
	if _, ok := o.Get("missing"); ok {
		t.Error("Get(missing) found something")
	}
	before := string(o.Bytes())
	tests := []struct {
		name string
		got  Object
		want string
	}{
		{"replace keeps place, drops repeats", o.Set("c", json.RawMessage("1")), `{"t":"x","c":1,"s":1}`},
		{"append new", o.Set("n", json.RawMessage("null")), `{"t":"x","c":false,"s":1,"c":true,"n":null}`},
		{"delete all", o.Delete("c"), `{"t":"x","s":1}`},
	}
	for _, tt := range tests {
		if string(tt.got.Bytes()) != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, tt.got.Bytes(), tt.want)
		}
	}
	if string(o.Bytes()) != before {
		t.Errorf("Set/Delete modified the receiver: %s", o.Bytes())
	}
}

// TestEncodeAsCouchDB: Marshal and AppendString write a string the same
// way, as CouchDB's jiffy does: <, >, & and U+2028/U+2029 as they are,
// invalid UTF-8 as U+FFFD, and only what JSON requires escaped.
func TestEncodeAsCouchDB(t *testing.T) {
	tests := []struct {
		in   any
		want string
	}{
		{"", `""`},
		{"<0.1.0>&", `"<0.1.0>&"`},
		{"a\"b\\c\n", `"a\"b\\c\n"`},
		{"\b\f\n\r\t\x00\x1f\x7f", `"\b\f\n\r\t\u0000\u001f` + "\x7f\""},
		{"é☃😀/", `"é☃😀/"`},
		{"id\u2028x\u2029", "\"id\u2028x\u2029\""},
		{"bad\xffutf8\ufffd", "\"bad\ufffdutf8\ufffd\""},
		{`\u2028 is text`, `"\\u2028 is text"`},
		{map[string]any{"\u2028": []string{"\u2029", `\\u2029`}}, "{\"\u2028\":[\"\u2029\",\"\\\\\\\\u2029\"]}"},
		{json.RawMessage(` { "a" : "\u2028" } `), "{\"a\":\"\u2028\"}"},
		{json.RawMessage(`["\\u2028"]`), `["\\u2028"]`},
		{map[string]any{"k": []int{1}}, `{"k":[1]}`},
	}
	for _, tt := range tests {
		got, err := Marshal(tt.in)
		if err != nil || string(got) != tt.want {
			t.Errorf("Marshal(%#v) = %s, %v; want %s", tt.in, got, err, tt.want)
		}
		if s, ok := tt.in.(string); ok {
			if got := string(AppendString([]byte("x"), s)); got != "x"+tt.want {
				t.Errorf("AppendString(%q) = %s, want x%s", s, got, tt.want)
			}
		}
	}
	if _, err := Marshal(func() {}); err == nil {
		t.Error("Marshal(func) did not fail")
	}
}

// FuzzAppendString: for any string, AppendString writes what Marshal
// writes, and it decodes back to the string (invalid UTF-8 as U+FFFD).
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "a\u2028b", "\\u2029", "\xff\xfe", "<&>", "\x00\"\\", "\ufffd\\\\ufffd"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := AppendString(nil, s)
		want, err := Marshal(s)
		if err != nil || string(got) != string(want) {
			t.Fatalf("AppendString(%q) = %s, Marshal = %s (%v)", s, got, want, err)
		}
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("%s: %v", got, err)
		}
		if back != string([]rune(s)) { // each invalid byte a U+FFFD

			t.Fatalf("%q came back as %q", s, back)
		}
	})
}

func TestBuilder(t *testing.T) {
	var b Builder
	if got := string(b.Raw()); got != "{}" {
		t.Errorf("empty Builder = %s", got)
	}
	var nilInt *int64
	b.Add("z", 1).Add("a", "<x>").Add("bad", func() {}).Add("n", nil).
		Add("p", nilInt).Add("r", json.RawMessage{}).Add("r2", json.RawMessage(`"s"`))
	want := `{"z":1,"a":"<x>","bad":null,"n":null,"p":null,"r":null,"r2":"s"}`
	if got := string(b.Raw()); got != want {
		t.Errorf("Builder = %s, want %s", got, want)
	}
	r := b.Raw()
	b.Add("more", 2)
	if string(r) != want {
		t.Errorf("Raw aliased the builder: %s", r)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1,"a":[{"b":"\u00e9"}]}`, `[]`, `{"a":}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		o, err := Parse(raw)
		if err != nil {
			return
		}
		again, err := Parse(o.Bytes())
		if err != nil {
			t.Fatalf("Bytes() of %q is not an object: %s", raw, o.Bytes())
		}
		if len(again) != len(o) {
			t.Fatalf("round trip lost members: %d → %d", len(o), len(again))
		}
		for i := range o {
			if again[i].Key != o[i].Key {
				t.Fatalf("key %d: %q → %q", i, o[i].Key, again[i].Key)
			}
		}
	})
}

// TestOrdered: DecodeOrdered keeps member order, repeated names and
// numbers' text; AppendOrdered writes them back compact, strings as
// AppendString writes them.
func TestOrdered(t *testing.T) {
	tests := []struct{ in, out string }{
		{` { "b" : 1.50 , "a" : [ true , null , "x\u2028" ] , "b" : {} } `, "{\"b\":1.50,\"a\":[true,null,\"x\u2028\"],\"b\":{}}"},
		{`[]`, `[]`},
		{`"<&>"`, `"<&>"`},
		{`-0e3`, `-0e3`},
	}
	for _, tt := range tests {
		v, err := DecodeOrdered([]byte(tt.in))
		if err != nil {
			t.Errorf("%s: %v", tt.in, err)
			continue
		}
		if got := string(AppendOrdered(nil, v)); got != tt.out {
			t.Errorf("%s -> %s, want %s", tt.in, got, tt.out)
		}
	}
	if _, err := DecodeOrdered([]byte(`{"a":}`)); err == nil {
		t.Error("invalid JSON decoded")
	}
}
