package replicate

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestParseBulkGet(t *testing.T) {
	tests := []struct {
		name string
		body string
		want []bulkGetResult
		err  bool
	}{
		{name: "empty results", body: `{"results":[]}`, want: nil},
		{name: "ok and error", body: ` { "results" : [ {"id":"a","docs":[{"ok":{"_id":"a","_rev":"1-x","s":"}],\"{"}}]},
			{"id":"b\u0041","docs":[{"error":{"id":"bA","rev":"1-y","error":"not_found","reason":"missing"}}]} ] } `,
			want: []bulkGetResult{
				{ID: "a", Docs: []bulkGetDoc{{OK: json.RawMessage(`{"_id":"a","_rev":"1-x","s":"}],\"{"}`)}}},
				{ID: "bA", Docs: []bulkGetDoc{{Error: json.RawMessage(`{"id":"bA","rev":"1-y","error":"not_found","reason":"missing"}`)}}},
			}},
		{name: "other members ignored, null ok is no doc", body: `{"x":[1,{"y":2}],"results":[{"id":5,"extra":true,"docs":[{"ok":null},{"ok":{"n":[1,2.5e3,null,false]}}]}]}`,
			want: []bulkGetResult{{Docs: []bulkGetDoc{{}, {OK: json.RawMessage(`{"n":[1,2.5e3,null,false]}`)}}}}},
		{name: "truncated", body: `{"results":[{"id":"a","docs":[{"ok":{"_id":"a"`, err: true},
		{name: "unterminated string", body: `{"results":[{"id":"a`, err: true},
		{name: "missing colon", body: `{"results" [1]}`, err: true},
		{name: "not an object", body: `[1]`, err: true},
		{name: "results not an array", body: `{"results":{}}`, err: true},
		{name: "empty", body: ``, err: true},
		{name: "ends after a key", body: `{"results":[{"id":`, err: true},
		{name: "ends after docs key", body: `{"results":[{"docs":[{"ok":`, err: true},
		{name: "trailing garbage", body: `{"results":[]}]`, err: true},
		{name: "escaped quotes and backslashes", body: `{"results":[{"id":"a\\","docs":[{"ok":{"s":"\\\"}"}}]}]}`,
			want: []bulkGetResult{{ID: `a\`, Docs: []bulkGetDoc{{OK: json.RawMessage(`{"s":"\\\"}"}`)}}}}},
		{name: "missing comma", body: `{"results":[{"id":"a"} {"id":"b"}]}`, err: true},
		{name: "attachments", body: `{"results":[{"id":"a","docs":[{"ok":{"_id":"a","_attachments": {"f":{"stub":true}}}},{"ok":{"_attachments":{ }}},{"ok":{"x":{"_attachments":{"f":1}}}},{"ok":{"_Attachments":{"f":1}}},{"ok":{"\u005fattachments":{"f":1}}},{"ok":{"_attachments":null}}]}]}`,
			want: []bulkGetResult{{ID: "a", Docs: []bulkGetDoc{
				{OK: json.RawMessage(`{"_id":"a","_attachments": {"f":{"stub":true}}}`), HasAtts: true},
				{OK: json.RawMessage(`{"_attachments":{ }}`)},
				{OK: json.RawMessage(`{"x":{"_attachments":{"f":1}}}`)},
				{OK: json.RawMessage(`{"_Attachments":{"f":1}}`), HasAtts: true},
				{OK: json.RawMessage(`{"\u005fattachments":{"f":1}}`), HasAtts: true},
				{OK: json.RawMessage(`{"_attachments":null}`)},
			}}}},
		{name: "escaped keys", body: `{"r\u0065sults":[{"\u0069d":"a","d\u006fcs":[{"\u006fk":{"_id":"a"}},{"err\u006fr":{"x":1}}]}]}`,
			want: []bulkGetResult{{ID: "a", Docs: []bulkGetDoc{{OK: json.RawMessage(`{"_id":"a"}`)}, {Error: json.RawMessage(`{"x":1}`)}}}}},
		{name: "ends inside ok", body: `{"results":[{"docs":[{"ok":{"_attachments":{`, err: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseBulkGet([]byte(tc.body))
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", err, tc.err)
			}
			if !tc.err && !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestParseBulkGetMatchesEncodingJSON checks the scanner against encoding/json on valid input.
func TestParseBulkGetMatchesEncodingJSON(t *testing.T) {
	bodies := []string{
		`{"results":[{"id":"d1","docs":[{"ok":{"_id":"d1","_rev":"2-a","_revisions":{"start":2,"ids":["a","b"]},"v":"\\\"q\\\\"}}]}]}`,
		"{\n  \"results\": [\n    {\"id\": \"\u00e9\", \"docs\": [ {\"ok\": {\"_id\":\"\u00e9\"} } ] }\n  ]\n}",
		// encoding/json matches member names case-insensitively.
		`{"Results":[{"ID":"d1","Docs":[{"OK":{"_id":"d1"}}]}]}`,
		`{"results":[{"id":"d1","docs":[{"ok":{"_id":"x"}}],"docs":[{"ok":{"_id":"d1"}}]}]}`,
	}
	for _, body := range bodies {
		var want struct {
			Results []struct {
				ID   string `json:"id"`
				Docs []struct {
					OK json.RawMessage `json:"ok"`
				} `json:"docs"`
			} `json:"results"`
		}
		if err := json.Unmarshal([]byte(body), &want); err != nil {
			t.Fatal(err)
		}
		got, err := parseBulkGet([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want.Results) {
			t.Fatalf("%d results, want %d", len(got), len(want.Results))
		}
		for i, r := range want.Results {
			if got[i].ID != r.ID || string(got[i].Docs[0].OK) != string(r.Docs[0].OK) {
				t.Errorf("result %d: got %s %s, want %s %s", i, got[i].ID, got[i].Docs[0].OK, r.ID, r.Docs[0].OK)
			}
		}
	}
}

// FuzzParseBulkGet checks the scanner never panics and agrees with
// encoding/json about the ids of valid responses.
func FuzzParseBulkGet(f *testing.F) {
	f.Add([]byte(`{"results":[{"id":"a","docs":[{"ok":{"_id":"a"}}]}]}`))
	f.Add([]byte(`{"results":[{"id":"a\"","docs":[{"error":{}}]}]}`))
	f.Add([]byte(`{"results":[{"id":"a","docs":[{"ok":{"_id":"a","_attachments":{"f":{}}}}]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := parseBulkGet(b)
		var want struct {
			Results []struct {
				ID json.RawMessage `json:"id"`
			} `json:"results"`
		}
		if err != nil || json.Unmarshal(b, &want) != nil {
			return
		}
		if len(got) != len(want.Results) {
			t.Fatalf("%d results, encoding/json %d", len(got), len(want.Results))
		}
		for _, r := range got {
			for _, d := range r.Docs {
				if d.OK != nil && json.Valid(d.OK) && !d.HasAtts && hasAttachments(d.OK) {
					t.Fatalf("HasAtts false for %s, which has attachments", d.OK)
				}
			}
		}
	})
}
