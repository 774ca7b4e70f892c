package couchapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestReadBodyRecycled checks that bodies within the recycled bounds are
// read whole into a buffer releaseBody gives back for the next request,
// that others are read as readBody reads them, and that the size limit
// still answers 413.
func TestReadBodyRecycled(t *testing.T) {
	// Drain buffers other tests may have released.
	for len(freeBodies) > 0 {
		<-freeBodies
	}
	tests := []struct {
		name     string
		size     int
		limit    int64
		recycled bool
		tooLarge bool
	}{
		{"small", 100, 1 << 30, false, false},
		{"bulk batch", 600 << 10, 1 << 30, true, false},
		{"lower bound", minRecycledBody, 1 << 30, true, false},
		{"above upper bound", maxRecycledBody + 1, 1 << 30, false, false},
		{"over the size limit", 600 << 10, 300 << 10, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := strings.Repeat("a", tc.size)
			req := func() *http.Request {
				r := httptest.NewRequest("POST", "/db/_bulk_docs", strings.NewReader(body))
				r.Body = http.MaxBytesReader(httptest.NewRecorder(), r.Body, tc.limit)
				return r
			}
			b, herr := readBodyRecycled(req())
			if tc.tooLarge {
				if herr != errTooLarge {
					t.Fatalf("error %v, want too large", herr)
				}
				return
			}
			if herr != nil || string(b) != body {
				t.Fatalf("read %d bytes, %v; want the %d-byte body", len(b), herr, tc.size)
			}
			releaseBody(b)
			b2, herr := readBodyRecycled(req())
			if herr != nil || string(b2) != body {
				t.Fatalf("second read: %d bytes, %v", len(b2), herr)
			}
			if same := &b[:1][0] == &b2[:1][0]; same != tc.recycled {
				t.Errorf("second body reused the first's buffer: %v, want %v", same, tc.recycled)
			}
			releaseBody(b2)
			for len(freeBodies) > 0 {
				<-freeBodies
			}
		})
	}
}
