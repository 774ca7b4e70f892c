package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// BenchmarkDocsToJobs10k: 10k `_replicator` docs written with _bulk_docs
// through minicouch → time until `_scheduler/docs` lists all of them as
// jobs (max_jobs 0, so none runs and only the frontend is measured).
func BenchmarkDocsToJobs10k(b *testing.B) {
	const n = 10000
	for i := 0; i < b.N; i++ {
		c := startCouch(b, "max_jobs = 0\nmax_churn = 0\n")
		start := time.Now()
		for k := 0; k < n; k += 1000 {
			var docs []string
			for j := k; j < k+1000; j++ {
				docs = append(docs, fmt.Sprintf(`{"_id":"r%05d","source":"http://127.0.0.1:1/s%d","target":"http://127.0.0.1:1/t%d","continuous":true}`, j, j, j))
			}
			c.must("POST", "/_replicator/_bulk_docs", `{"docs":[`+strings.Join(docs, ",")+`]}`, 201)
		}
		written := time.Since(start)
		c.eventually("all docs are jobs", 10*time.Minute, func() bool {
			var r struct {
				TotalRows int `json:"total_rows"`
			}
			json.Unmarshal([]byte(c.must("GET", "/_scheduler/docs?limit=0", "", 200)), &r)
			return r.TotalRows == n
		})
		all := time.Since(start)
		b.ReportMetric(all.Seconds(), "s_until_all_jobs")
		b.ReportMetric(written.Seconds(), "s_writing_docs")
		b.ReportMetric(float64(n)/all.Seconds(), "docs/s")
		c.stop()
	}
}

// BenchmarkSwap200: the swap pause with 200 running continuous
// replications (long: set COUCHEPI_LONG=1).
func BenchmarkSwap200(b *testing.B) {
	if os.Getenv("COUCHEPI_LONG") == "" {
		b.Skip("long benchmark: set COUCHEPI_LONG=1")
	}
	for i := 0; i < b.N; i++ {
		m := runSwap(b, 200, "")
		b.ReportMetric(m.reload.Seconds(), "s_reload_call")
		b.ReportMetric(m.allRunning.Seconds(), "s_until_all_running")
		b.ReportMetric(m.refused.Seconds(), "s_longest_write_refusal")
	}
}
