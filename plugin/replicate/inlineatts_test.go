package replicate

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestInlineAttBytes checks which _bulk_get docs (stubs, with
// att_encoding_info) are fetched again with their attachments inline.
func TestInlineAttBytes(t *testing.T) {
	stub := func(length int, extra string) string {
		return fmt.Sprintf(`{"content_type":"application/octet-stream","revpos":1,"digest":"md5-x","length":%d,"stub":true%s}`, length, extra)
	}
	tests := []struct {
		name string
		doc  string
		size int64
		ok   bool
	}{
		{"no attachments", `{"_id":"a","_rev":"1-a"}`, 0, false},
		{"empty attachments", `{"_id":"a","_rev":"1-a","_attachments":{}}`, 0, false},
		{"one small", `{"_id":"a","_attachments":{"x":` + stub(65536, "") + `}}`, 65536, true},
		{"zero length", `{"_id":"a","_attachments":{"x":` + stub(0, "") + `}}`, 0, true},
		{"two at the limit", `{"_id":"a","_attachments":{"x":` + stub(inlineAttMax/2, "") + `,"y":` + stub(inlineAttMax/2, "") + `}}`, inlineAttMax, true},
		{"two over the limit", `{"_id":"a","_attachments":{"x":` + stub(inlineAttMax/2, "") + `,"y":` + stub(inlineAttMax/2+1, "") + `}}`, 0, false},
		{"gzip stored", `{"_id":"a","_attachments":{"x":` + stub(100, `,"encoding":"gzip","encoded_length":80`) + `}}`, 0, false},
		{"no length", `{"_id":"a","_attachments":{"x":{"stub":true,"digest":"md5-x"}}}`, 0, false},
		{"negative length", `{"_id":"a","_attachments":{"x":` + stub(-1, "") + `}}`, 0, false},
		{"not a stub", `{"_id":"a","_attachments":{"x":{"data":"AAAA","length":3}}}`, 0, false},
		{"attachments not an object", `{"_id":"a","_attachments":[1]}`, 0, false},
		{"not json", `{"_id":`, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			size, ok := inlineAttBytes(json.RawMessage(tc.doc))
			if size != tc.size || ok != tc.ok {
				t.Errorf("inlineAttBytes = %d, %v; want %d, %v", size, ok, tc.size, tc.ok)
			}
		})
	}
}

// TestHasInlineData checks which docs of an attachments=true _bulk_get
// answer _bulk_docs can write as they are.
func TestHasInlineData(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want bool
	}{
		{"no attachments", `{"_id":"a"}`, true},
		{"data", `{"_id":"a","_attachments":{"x":{"data":"AAAA"},"y":{"data":""}}}`, true},
		{"a stub", `{"_id":"a","_attachments":{"x":{"data":"AAAA"},"y":{"stub":true}}}`, false},
		{"follows", `{"_id":"a","_attachments":{"x":{"follows":true}}}`, false},
		{"no data", `{"_id":"a","_attachments":{"x":{"length":3}}}`, false},
		{"data not a string", `{"_id":"a","_attachments":{"x":{"data":null}}}`, false},
		{"not json", `{"_id":`, false},
		{"attachments not an object", `{"_id":"a","_attachments":[]}`, false},
		{"attachment not an object", `{"_id":"a","_attachments":{"x":1}}`, false},
		{"gzip stored", `{"_id":"a","_attachments":{"x":{"data":"AAAA","encoding":"gzip","encoded_length":20}}}`, false},
		{"identity", `{"_id":"a","_attachments":{"x":{"data":"AAAA","encoding":"identity"}}}`, true},
		{"stub false", `{"_id":"a","_attachments":{"x":{"stub":false,"follows":false,"data":"AAAA"}}}`, true},
		{"keys in other case", `{"_id":"a","_Attachments":{"x":{"Data":"AAAA","STUB":true}}}`, false},
		{"escaped keys", `{"_id":"a","\u005fattachments":{"x":{"d\u0061ta":"AAAA"}}}`, true},
		{"data in a string value", `{"_id":"a","v":"\"_attachments\":{}","_attachments":{"x":{"stub":true}}}`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := hasInlineData(json.RawMessage(tc.doc)); got != tc.want {
				t.Errorf("hasInlineData = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestHasInlineDataScans checks that judging a doc with its attachment
// data inline allocates nothing: encoding/json copied and checked the
// data, half the replicator's CPU time on 64 KiB attachments.
func TestHasInlineDataScans(t *testing.T) {
	doc := json.RawMessage(`{"_id":"a","_rev":"1-a","_attachments":{"x":{"content_type":"application/octet-stream","revpos":1,"digest":"md5-x","data":"` +
		strings.Repeat("QUJD", 64<<10) + `"}}}`)
	if !hasInlineData(doc) {
		t.Fatal("hasInlineData = false")
	}
	if n := testing.AllocsPerRun(10, func() { hasInlineData(doc) }); n != 0 {
		t.Errorf("hasInlineData allocated %v times per doc, want 0", n)
	}
}
