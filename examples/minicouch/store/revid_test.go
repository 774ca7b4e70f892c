package store

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/couchepi/couchepi/internal/jsonscan"
)

// TestCouchRevHash: revision ids are CouchDB 3.5.0's for the same edit;
// the expected ids were read from a CouchDB 3.5.0.
func TestCouchRevHash(t *testing.T) {
	att := func(name, ctype, digest string) storedAtt {
		return storedAtt{Name: name, ContentType: ctype, Digest: digest}
	}
	const bin3 = "md5-0W+zbwkR+HiZjBNhka9wXg==" // "xyz"
	tests := []struct {
		name       string
		deleted    bool
		parentGen  uint64
		parentHash string
		body       string
		atts       []storedAtt
		want       string
	}{
		{"PUT /db/d/hello.txt", false, 0, "", `{}`, []storedAtt{att("hello.txt", "text/plain", "md5-iMaiC8wqiFlD2NjLTemvCQ==")}, "cc8f24d15370e2b5bdde8079698301d2"},
		{"empty text attachment", false, 0, "", `{}`, []storedAtt{att("empty.txt", "text/plain", "md5-cCkGbCesb17xjWYNV0GXmg==")}, "f18a5fb429a1993856cfe9a641d1dd99"},
		{"attachments in doc order, hashed reversed", false, 0, "", `{}`, []storedAtt{att("b", "application/octet-stream", bin3), att("a", "application/octet-stream", bin3)}, "a7726d09a63e7ad02e6fc8586617ebd1"},
		{"standalone PUT goes first", false, 1, "a7726d09a63e7ad02e6fc8586617ebd1", `{}`, []storedAtt{att("c", "application/octet-stream", bin3), att("b", "application/octet-stream", bin3), att("a", "application/octet-stream", bin3)}, "8a1d2302fd7e44be7fb1e0646093a2cc"},
		{"every kind of value", false, 0, "", `{"a":1,"b":[1,2,3],"c":{"d":null,"e":true},"f":1.5,"g":"str\u00e9","h":-5,"i":1e2,"j":12345678901234567890,"k":[],"l":{},"m":[1,"x",2.0],"n":300,"o":-2147483649,"p":"\ud83d\ude00","q":[256,1],"r":false,"s":0.1,"t":-0,"u":"a\"b\\c\n","v":2147483647,"w":-2147483648,"x":-1.5e-300}`, nil, "de6ac9a09f7b3f5932032296315469b0"},
		{"duplicate keys: the last wins, at its place", false, 0, "", `{"a":1,"b":2,"a":3}`, nil, "cf8195ee4268460f49235c8e98d42c6f"},
		{"seven attachments", false, 0, "", `{}`, []storedAtt{
			att("a.txt", "text/plain", "md5-iMaiC8wqiFlD2NjLTemvCQ=="), att("b.bin", "application/octet-stream", "md5-XUFAKrxLKna5cZ2REBfFkg=="),
			att("c", "TEXT/HTML; charset=utf-8", "md5-iMaiC8wqiFlD2NjLTemvCQ=="), att("d", "application/json", "md5-iMaiC8wqiFlD2NjLTemvCQ=="),
			att("e", "image/svg+xml", "md5-XUFAKrxLKna5cZ2REBfFkg=="), att("f", "application/octet-stream", "md5-XUFAKrxLKna5cZ2REBfFkg=="),
			att("g", " text/plain ;x=y", "md5-iMaiC8wqiFlD2NjLTemvCQ==")}, "a1151bf90cc15439625c3aeedc4364a3"},
		{"duplicate keys among many", false, 0, "", `{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":10,"k11":11,"k12":12,"k13":13,"k14":14,"k15":15,"k16":16,"k0":17,"\u006b1":18}`, nil, "d36b2eb347fd6a76a0b11e7d8c14f824"},
		{"an escaped duplicate key", false, 0, "", `{"k1":1,"\u006b1":18}`, nil, "f91ebf721d0fbb42bb1e342c0e9b5e49"},
		{"empty body", false, 0, "", `{}`, nil, "967a00dff5e02add41819138abb3284d"},
		{"nested empties and a byte list", false, 0, "", `{"x":[[],[[]],{"y":[0,255]}]}`, nil, "b4b29ef29f27b55dda95e7fdf66218e9"},
		{"whitespace does not count", false, 0, "", " {\"x\" : [ [] , [ [ ] ] , { \"y\" : [ 0 , 255 ] } ] }\n", nil, "b4b29ef29f27b55dda95e7fdf66218e9"},
		{"new doc", false, 0, "", `{"v":1}`, nil, "7a7e4b29f3af401e69b6f86e4c26b727"},
		{"an edit", false, 1, "7a7e4b29f3af401e69b6f86e4c26b727", `{"v":2}`, nil, "d0df861eb528e79690cd2ff3c4d394f3"},
		{"a deletion", true, 2, "d0df861eb528e79690cd2ff3c4d394f3", `{}`, nil, "9b72b0117fa1058c3b8485ca2583dea3"},
		{"recreated on the tombstone", false, 3, "9b72b0117fa1058c3b8485ca2583dea3", `{"v":3}`, nil, "eaa9706a35c0c31f160a9ca72e0a72d3"},
		{"on a parent id that is not hex", false, 1, "abc", `{"v":2}`, nil, "e4d9269042dd9ce6d528359cc48ead40"},
		{"a bignum", false, 0, "", `{"big":4149515568880992958512407863691161151012446232242436899995657329690652811412908146399707048947103794288197886611300789182395151075411775307886874834113963687061181803401509523685376}`, nil, "eac87f7fc5a48622ca955cb6f472e2c9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := couchRevHash(tt.deleted, tt.parentGen, tt.parentHash, []byte(tt.body), tt.atts); got != tt.want {
				t.Errorf("%s, CouchDB: %s", got, tt.want)
			}
		})
	}
}

// TestCouchRevHashEscapes: a revision id hashes the decoded body, so a
// character written raw or escaped gives the same id: a body minicouch
// re-encodes (a Mango index's design doc, a _users doc whose password it
// hashes) keeps the id CouchDB computes, whichever way the encoder writes
// U+2028, U+2029 or <.
func TestCouchRevHashEscapes(t *testing.T) {
	for _, pair := range [][2]string{
		{`{"s":"\u2028\u2029"}`, "{\"s\":\"\u2028\u2029\"}"},
		{`{"\u2028":1}`, "{\"\u2028\":1}"},
		{`{"s":"\u003c\u003e\u0026"}`, `{"s":"<>&"}`},
		{`{"s":"\ufffd"}`, "{\"s\":\"\ufffd\"}"},
	} {
		escaped := couchRevHash(false, 0, "", []byte(pair[0]), nil)
		if raw := couchRevHash(false, 0, "", []byte(pair[1]), nil); raw != escaped {
			t.Errorf("%s hashes to %s, %s to %s", pair[0], escaped, pair[1], raw)
		}
	}
}

// TestCouchRevHashNested: objects and arrays nested in each other, with
// repeated keys and byte lists at every level, get the ids the encoder
// gave before it read each byte once (ids checked against CouchDB above);
// and a body nested 10,000 deep is encoded in time linear in its size.
func TestCouchRevHashNested(t *testing.T) {
	for body, want := range map[string]string{
		`{"a":{"b":[0,1,{"c":[255,0],"c":[256]},[1,2,[3,[4]]]],"b":{"d":1,"d":{"e":[7,7,7]}}},"a":[{"x":1,"x":2}]}`: "854f2ec301cf85d08d99741d5b5988ab",
		`{"x":` + strings.Repeat(`{"k":[1,2],"k":`, 300) + "[0,255]" + strings.Repeat("}", 300) + `}`:               "bd40a72a19502c6ce49cde08fe4994b7",
	} {
		if got := couchRevHash(false, 0, "", []byte(body), nil); got != want {
			t.Errorf("%.60s…: %s, want %s", body, got, want)
		}
	}
	// 530 KB nested 9,990 deep: an encoder that finds each nested value's
	// end before encoding it reads it 5,000 times over (10 s on the
	// machine this was written on); read once, it takes 50 ms. The bound
	// is generous for a loaded machine and the race detector.
	deep := []byte(`{"x":` + strings.Repeat(`[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,`, 9990) + "1" + strings.Repeat("]", 9990) + `}`)
	start := time.Now()
	couchRevHash(false, 0, "", deep, nil)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the id of a body nested 9,990 deep took %s", took)
	}
}

// BenchmarkCouchRevHash: the rev id of a typical small document.
func BenchmarkCouchRevHash(b *testing.B) {
	body := []byte(`{"type":"order","customer":"c-1234","items":[{"sku":"a1","qty":2,"price":9.5},{"sku":"b7","qty":1,"price":120}],"total":139,"note":"leave at the door","tags":["x","y","z"],"paid":true,"created":"2024-05-01T10:00:00Z"}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		couchRevHash(false, 3, "9b72b0117fa1058c3b8485ca2583dea3", body, nil)
	}
}

// FuzzCouchRevHash: any valid JSON object body gets a revision id, the
// same whatever its insignificant white space.
func FuzzCouchRevHash(f *testing.F) {
	f.Add([]byte(`{"a":[1,2,{"b":"c\u00e9"}],"d":1.5e3,"a":-7}`))
	f.Add([]byte(`{ "x" : [ 255 , 256 , -1 ] , "y" : { } }`))
	f.Add([]byte(`{"n":123456789012345678901234567890,"f":-0.0}`))
	f.Add([]byte(`{"a":{"b":[0,1,{"c":[255,0],"c":[256]},[[-0],[1.0]]],"b":{"d":1}}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if !json.Valid(body) || jsonscan.Members(body, func(_, _ []byte) error { return nil }) != nil {
			return
		}
		h := couchRevHash(false, 1, "abc", body, nil)
		if len(h) != 32 {
			t.Fatalf("hash %q", h)
		}
		if c := compactValid(body); couchRevHash(false, 1, "abc", c, nil) != h {
			t.Fatalf("white space changed the id of %q", body)
		}
	})
}
