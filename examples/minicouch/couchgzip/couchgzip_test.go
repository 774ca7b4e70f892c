package couchgzip

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// TestRoundTrip: every build writes gzip that NewReader inflates back, at
// every level, and refuses levels CouchDB would not compress with.
func TestRoundTrip(t *testing.T) {
	data := []byte(strings.Repeat("round trip data ", 5000))
	for level := MinLevel; level <= MaxLevel; level++ {
		z, err := Gzip(data, level)
		if err != nil {
			t.Fatal(err)
		}
		zr, err := NewReader(bytes.NewReader(z))
		if err != nil {
			t.Fatal(err)
		}
		back, err := io.ReadAll(zr)
		if err != nil || !bytes.Equal(back, data) {
			t.Fatalf("level %d: %d bytes back, %v", level, len(back), err)
		}
	}
	for _, level := range []int{-1, 0, 10} {
		if _, err := NewWriter(io.Discard, level); err == nil {
			t.Errorf("level %d accepted", level)
		}
	}
}

// TestWriterAfterClose: Close is idempotent and later writes fail.
func TestWriterAfterClose(t *testing.T) {
	zw, err := NewWriter(io.Discard, 8)
	if err != nil {
		t.Fatal(err)
	}
	zw.Write([]byte("x"))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := zw.Write([]byte("y")); err == nil {
		t.Error("Write after Close succeeded")
	}
}
