package store

import (
	"encoding/base64"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
)

// TestInlineDataAsEncodingJSON checks that attachments with inline data
// parse as encoding/json reads them (the fast path cuts "data" out), on
// the shapes where the two could differ.
func TestInlineDataAsEncodingJSON(t *testing.T) {
	hello := base64.StdEncoding.EncodeToString([]byte("hello"))
	for _, obj := range []string{
		`{"content_type":"text/plain","data":"` + hello + `"}`,
		`{"data":"` + hello + `","content_type":"x/y","length":5,"digest":"md5-x","revpos":2}`,
		`{"data":""}`,
		`{ "data" : "` + hello + `" , "content_type" : "a/b" }`,
		`{"data":"aGVs\nbG8="}`,             // base64 ignores newlines
		`{"data":"aGVs\/bG8="}`,             // an escape: encoding/json's path
		`{"data":"aGVsbG8=","Data":"eA=="}`, // the last member of either case wins
		`{"Data":"aGVsbG8="}`,
		`{"d\u0061ta":"aGVsbG8="}`,
		`{"data":"aGVsbG8=","data":"eA=="}`,
		`{"data":"!!"}`,
		`{"data":null}`,
		`{"data":1}`,
		`{"data":"aGVsbG8=","content_type":1}`,
		`{"data":"aGVsbG8=","encoding":"gzip","encoded_length":3}`,
		`{"data":"aGVsbG8=","stub":true}`,
	} {
		got, gotErr := parseAttachments([]byte(`{"f":` + obj + `}`))
		want, wantErr := referenceAttachment("f", []byte(obj))
		if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
			t.Errorf("%s: error %v, want %v", obj, gotErr, wantErr)
			continue
		}
		if gotErr == nil {
			g, w := got[0], want
			if g.Name != w.Name || string(g.Data) != string(w.Data) || (g.Data == nil) != (w.Data == nil) || g.ContentType != w.ContentType ||
				g.Stub != w.Stub || g.Digest != w.Digest || g.Length != w.Length || g.RevPos != w.RevPos || g.Encoding != w.Encoding || g.EncodedLength != w.EncodedLength {
				t.Errorf("%s:\n got %+v\nwant %+v", obj, g, w)
			}
		}
	}
}

// referenceAttachment is what parseAttachments made of one attachment
// before inline data was cut out: encoding/json reads the whole object.
func referenceAttachment(name string, v []byte) (Attachment, error) {
	var ra rawAttachment
	if err := json.Unmarshal(v, &ra); err != nil {
		return Attachment{}, BadRequest("Invalid attachment " + name)
	}
	a := Attachment{Name: name, Stub: ra.Stub, Follows: ra.Follows, Digest: ra.Digest,
		Length: ra.Length, RevPos: ra.RevPos, Encoding: ra.Encoding, EncodedLength: ra.EncodedLength, ContentType: "application/octet-stream"}
	if ra.ContentType != nil {
		a.ContentType = *ra.ContentType
	}
	switch {
	case ra.Stub, ra.Follows:
	case ra.Data != nil:
		data, err := base64.StdEncoding.DecodeString(*ra.Data)
		if err != nil {
			return Attachment{}, BadRequest("Invalid attachment data for " + name)
		}
		a.Data, a.Encoding, a.EncodedLength = data, "", 0
	default:
		return Attachment{}, BadRequest("Attachment " + name + " has no data, stub or follows")
	}
	return a, nil
}

// TestInlineDataOneCopy checks that a doc's inline attachment data is
// decoded straight from the request's bytes: parsing allocates about the
// decoded data once, not also a string of the base64 and a copy of it
// (three times the data, which made encoding/json most of the CPU time
// _bulk_docs took to write docs with 64 KiB attachments).
func TestInlineDataOneCopy(t *testing.T) {
	const size = 256 << 10
	doc := `{"_id":"a","_attachments":{"f":{"content_type":"application/octet-stream","data":"` +
		base64.StdEncoding.EncodeToString([]byte(strings.Repeat("x", size))) + `"}}}`
	var before, after runtime.MemStats
	const runs = 10
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		d, err := ParseValidDocInPlace([]byte(doc))
		if err != nil || len(d.Attachments) != 1 || len(d.Attachments[0].Data) != size {
			t.Fatalf("ParseValidDocInPlace: %v", err)
		}
	}
	runtime.ReadMemStats(&after)
	// Each run copies the doc ([]byte(doc)) and parses it in place, as
	// _bulk_docs does.
	perRun := (after.TotalAlloc - before.TotalAlloc) / runs
	if limit := uint64(len(doc) + size*3/2); perRun > limit {
		t.Errorf("parsing a doc with %d bytes of inline data allocated %d bytes, want at most %d", size, perRun, limit)
	}
}
