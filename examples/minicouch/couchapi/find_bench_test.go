package couchapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/couchepi/couchepi/examples/minicouch/store"
)

// BenchmarkFind100k: one _find for 10 of 100,000 docs by a range of a
// field, through a json index on it ("indexed") and by scanning every doc
// ("scan"), in the same run. The index is built before the timer starts
// (its first query reads the whole db once).
func BenchmarkFind100k(b *testing.B) {
	const n = 100_000
	ts, srv := newTestServer(b)
	ctx := context.Background()
	for _, name := range []string{"indexed", "scan"} {
		db, err := srv.store.CreateDB(name)
		if err != nil {
			b.Fatal(err)
		}
		for start := 0; start < n; start += 5000 {
			docs := make([]*store.Doc, 0, 5000)
			for i := start; i < start+5000; i++ {
				d, herr := parseDocBody([]byte(fmt.Sprintf(`{"_id":"d%06d","n":%d,"text":"%s"}`, i, i, strings.Repeat("x", 100))))
				if herr != nil {
					b.Fatal(herr)
				}
				docs = append(docs, d)
			}
			if _, err := db.BulkDocs(ctx, docs, true); err != nil {
				b.Fatal(err)
			}
		}
	}
	post := func(b *testing.B, path, body string, want int) {
		req, _ := http.NewRequest("POST", ts.URL+path, strings.NewReader(body))
		req.SetBasicAuth("admin", "pass")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != want {
			b.Fatalf("%s: %v %v", path, resp.StatusCode, err)
		}
		resp.Body.Close()
	}
	post(b, "/indexed/_index", `{"index":{"fields":["n"]}}`, 200)
	query := `{"selector":{"n":{"$gte":50000,"$lt":50010}}}`
	post(b, "/indexed/_find", query, 200) // builds the index
	for _, name := range []string{"indexed", "scan"} {
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				post(b, "/"+name+"/_find", query, 200)
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/find")
		})
	}
}
