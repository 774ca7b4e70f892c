//go:build cgo && !nozlib

package couchgzip

import (
	"bytes"
	"crypto/md5"
	"encoding/base64"
	"strings"
	"testing"
)

// TestCouchDBDigests: the bytes written are CouchDB 3.5.0's for the same
// data and level, so the md5 digests of compressed attachments are
// CouchDB's. The expected values were read from a CouchDB 3.5.0 after
// `PUT /db/d/a` with Content-Type text/plain (its default level, 8).
func TestCouchDBDigests(t *testing.T) {
	if !CouchDB {
		t.Fatal("a cgo build must write CouchDB's bytes")
	}
	tests := []struct {
		name, data, digest string
		encodedLength      int
	}{
		{"hello", "hello", "md5-iMaiC8wqiFlD2NjLTemvCQ==", 25},
		{"hello world x100", strings.Repeat("hello world ", 100), "md5-G9o6fIJCJg8BBt0XxAKhmQ==", 43},
		{"empty", "", "md5-cCkGbCesb17xjWYNV0GXmg==", 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			z, err := Gzip([]byte(tt.data), 8)
			if err != nil {
				t.Fatal(err)
			}
			sum := md5.Sum(z)
			if got := "md5-" + base64.StdEncoding.EncodeToString(sum[:]); got != tt.digest || len(z) != tt.encodedLength {
				t.Errorf("digest %s, %d bytes; CouchDB: %s, %d bytes", got, len(z), tt.digest, tt.encodedLength)
			}
		})
	}
}

// bigText is 3 MiB of text, the same on every run.
func bigText() []byte {
	var b strings.Builder
	for i := 0; b.Len() < 3<<20; i++ {
		b.WriteString("line ")
		b.WriteString(strings.Repeat(string(rune('a'+i%26)), i%37))
		b.WriteString(" of some text that compresses\n")
	}
	return []byte(b.String()[:3<<20])
}

// TestCouchDBDigestBig: a 3 MiB attachment, which CouchDB deflates in the
// 4 KiB pieces its stream buffers, has CouchDB's digest too.
func TestCouchDBDigestBig(t *testing.T) {
	z, err := Gzip(bigText(), 8)
	if err != nil {
		t.Fatal(err)
	}
	sum := md5.Sum(z)
	if got, want := "md5-"+base64.StdEncoding.EncodeToString(sum[:]), bigTextDigest; got != want || len(z) != bigTextEncodedLength {
		t.Errorf("digest %s, %d bytes; CouchDB: %s, %d bytes", got, len(z), want, bigTextEncodedLength)
	}
}

// TestChunkingDoesNotChangeBytes: the output depends only on the data,
// not on how it is split across writes (no flush before the end).
func TestChunkingDoesNotChangeBytes(t *testing.T) {
	data := bigText()
	for _, size := range []int{1, 4096, 65537, 1 << 20, 3 << 20} {
		in := data
		if size == 1 {
			in = data[:200<<10] // byte by byte: a shorter prefix
		}
		whole, err := Gzip(in, 8)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		zw, err := NewWriter(&out, 8)
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off < len(in); off += size {
			if _, err := zw.Write(in[off:min(off+size, len(in))]); err != nil {
				t.Fatal(err)
			}
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Bytes(), whole) {
			t.Errorf("writes of %d bytes: %d bytes out, one write: %d", size, out.Len(), len(whole))
		}
	}
}

// CouchDB 3.5.0's digest and encoded_length of bigText as a text/plain
// attachment.
const (
	bigTextDigest        = "md5-L0OwJOsFJJt3VCLCkwOQgg=="
	bigTextEncodedLength = 126487
)
