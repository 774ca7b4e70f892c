package store

import (
	"bufio"
	"context"
	"encoding/base64"
	"io"
	"strconv"

	"github.com/couchepi/couchepi/internal/jsonobj"
	"github.com/couchepi/couchepi/internal/jsonscan"
)

// MarshalJSON renders the revision as CouchDB does (_id, _rev, body
// members, _deleted, _revisions, _revs_info, _conflicts,
// _deleted_conflicts, _local_seq, _attachments), every attachment as a
// stub. Use DB.WriteDocJSON to include attachment data.
func (d *DocRev) MarshalJSON() ([]byte, error) {
	return d.appendJSON(nil, func(buf []byte, a AttachmentInfo) ([]byte, error) {
		return appendAttStub(buf, a, d.AttEncodingInfo), nil
	})
}

// WriteDocJSON writes the revision's JSON to w. Attachments marked
// Stub=false get their data inline as base64 ("data", decoded when it is
// stored gzipped), or, with follows, "follows":true with their encoding
// so the caller can send them, as they are stored, as multipart parts in
// the order of d.Attachments. When w is a *bufio.Writer the JSON is rendered
// straight into its buffer and left there for the caller to flush (a
// _bulk_get answer renders hundreds of docs into one writer).
func (db *DB) WriteDocJSON(ctx context.Context, w io.Writer, d *DocRev, follows bool) error {
	bw, shared := w.(*bufio.Writer)
	if !shared {
		bw = bufio.NewWriter(w)
	}
	var werr error
	buf, err := d.appendJSON(bw.AvailableBuffer(), func(buf []byte, a AttachmentInfo) ([]byte, error) {
		switch {
		case a.Stub:
			return appendAttStub(buf, a, d.AttEncodingInfo), nil
		case follows:
			buf = appendAttHead(buf, a)
			buf = append(buf, `,"length":`...)
			buf = strconv.AppendInt(buf, a.Length, 10)
			buf = append(buf, `,"follows":true`...)
			return appendAttEncoding(buf, a, true), nil
		}
		buf = appendAttHead(buf, a)
		buf = append(buf, `,"data":"`...)
		if _, err := bw.Write(buf); err != nil {
			werr = err
			return nil, err
		}
		buf = nil // buf may share bw's buffer, which the data below overwrites
		rc, err := db.OpenAttachmentDecoded(ctx, a)
		if err != nil {
			return nil, err
		}
		enc := base64.NewEncoder(base64.StdEncoding, bw)
		_, err = io.Copy(enc, rc)
		rc.Close()
		if err == nil {
			err = enc.Close()
		}
		if err != nil {
			werr = err
			return nil, err
		}
		buf = append(buf, '"')
		return appendAttEncoding(buf, a, d.AttEncodingInfo), nil
	})
	if werr != nil {
		return werr
	}
	if err != nil {
		return err
	}
	if _, err := bw.Write(buf); err != nil {
		return err
	}
	if shared {
		return nil
	}
	return bw.Flush()
}

// appendJSON renders the document; att renders one attachment's object
// (it may flush buf elsewhere and return a fresh buffer).
func (d *DocRev) appendJSON(buf []byte, att func([]byte, AttachmentInfo) ([]byte, error)) ([]byte, error) {
	buf = append(buf, `{"_id":`...)
	buf = jsonobj.AppendString(buf, d.ID)
	buf = append(buf, `,"_rev":`...)
	buf = jsonobj.AppendString(buf, d.Rev)
	if body := trimObject(d.Body); len(body) > 0 {
		buf = append(buf, ',')
		buf = append(buf, body...)
	}
	if d.Deleted {
		buf = append(buf, `,"_deleted":true`...)
	}
	if d.Revisions != nil {
		buf = append(buf, `,"_revisions":`...)
		b, _ := jsonobj.Marshal(d.Revisions)
		buf = append(buf, b...)
	}
	if d.RevsInfo != nil {
		buf = append(buf, `,"_revs_info":`...)
		b, _ := jsonobj.Marshal(d.RevsInfo)
		buf = append(buf, b...)
	}
	if len(d.Conflicts) > 0 {
		buf = append(buf, `,"_conflicts":`...)
		b, _ := jsonobj.Marshal(d.Conflicts)
		buf = append(buf, b...)
	}
	if len(d.DeletedConflicts) > 0 {
		buf = append(buf, `,"_deleted_conflicts":`...)
		b, _ := jsonobj.Marshal(d.DeletedConflicts)
		buf = append(buf, b...)
	}
	if d.LocalSeq > 0 {
		buf = append(buf, `,"_local_seq":`...)
		buf = strconv.AppendUint(buf, d.LocalSeq, 10)
	}
	if len(d.Attachments) > 0 {
		buf = append(buf, `,"_attachments":{`...)
		for i, a := range d.Attachments {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = jsonobj.AppendString(buf, a.Name)
			buf = append(buf, ':')
			var err error
			if buf, err = att(buf, a); err != nil {
				return nil, err
			}
			buf = append(buf, '}')
		}
		buf = append(buf, '}')
	}
	return append(buf, '}'), nil
}

// trimObject returns the members of a JSON object without the braces.
func trimObject(obj []byte) []byte {
	s, e := jsonscan.SkipSpace(obj, 0), len(obj)
	for e > s && (obj[e-1] == ' ' || obj[e-1] == '\n' || obj[e-1] == '\t' || obj[e-1] == '\r') {
		e--
	}
	if e-s < 2 {
		return nil
	}
	inner := obj[s+1 : e-1]
	if jsonscan.SkipSpace(inner, 0) == len(inner) {
		return nil
	}
	return inner
}

// appendAttHead opens an attachment object: content_type, revpos, digest.
func appendAttHead(buf []byte, a AttachmentInfo) []byte {
	buf = append(buf, `{"content_type":`...)
	buf = jsonobj.AppendString(buf, a.ContentType)
	buf = append(buf, `,"revpos":`...)
	buf = strconv.AppendInt(buf, int64(a.RevPos), 10)
	buf = append(buf, `,"digest":`...)
	return jsonobj.AppendString(buf, a.Digest)
}

func appendAttStub(buf []byte, a AttachmentInfo, showEncoding bool) []byte {
	buf = appendAttHead(buf, a)
	buf = append(buf, `,"length":`...)
	buf = strconv.AppendInt(buf, a.Length, 10)
	buf = append(buf, `,"stub":true`...)
	return appendAttEncoding(buf, a, showEncoding)
}

// appendAttEncoding appends an encoded attachment's encoding and
// encoded_length when showEncoding (CouchDB's att_encoding_info).
func appendAttEncoding(buf []byte, a AttachmentInfo, showEncoding bool) []byte {
	if a.Encoding == "" || !showEncoding {
		return buf
	}
	buf = append(buf, `,"encoding":`...)
	buf = jsonobj.AppendString(buf, a.Encoding)
	buf = append(buf, `,"encoded_length":`...)
	return strconv.AppendInt(buf, a.EncodedLength, 10)
}
