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

func TestMarshalNoHTMLEscape(t *testing.T) {
	tests := []struct {
		in   any
		want string
	}{
		{"<0.1.0>&", `"<0.1.0>&"`},
		{"a\"b\\c\n", `"a\"b\\c\n"`},
		{"\u2028", `"\u2028"`},
		{map[string]any{"k": []int{1}}, `{"k":[1]}`},
		{json.RawMessage(` { "a" : 1 } `), `{"a":1}`},
	}
	for _, tt := range tests {
		got, err := Marshal(tt.in)
		if err != nil || string(got) != tt.want {
			t.Errorf("Marshal(%#v) = %s, %v; want %s", tt.in, got, err, tt.want)
		}
		if s, ok := tt.in.(string); ok {
			if got := string(AppendString(nil, s)); got != tt.want {
				t.Errorf("AppendString(%q) = %s, want %s", s, got, tt.want)
			}
		}
	}
	if _, err := Marshal(func() {}); err == nil {
		t.Error("Marshal(func) did not fail")
	}
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
