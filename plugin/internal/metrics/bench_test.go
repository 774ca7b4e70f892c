package metrics

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/internal/jobdata"
	"github.com/couchepi/couchepi/plugin/internal/jobstore"
	"github.com/couchepi/couchepi/plugin/internal/seal"
	"github.com/couchepi/couchepi/plugin/jobs"
	"github.com/couchepi/couchepi/plugin/kv"
	"github.com/prometheus/common/expfmt"
)

// BenchmarkScrape100kJobs gathers the replicator's metrics (what one
// Prometheus scrape or one _stats read asks of the plugin) with 100,000
// job records in a bolt queue, and prints the time and memory of one
// scrape.
func BenchmarkScrape100kJobs(b *testing.B) { benchScrape(b, 100_000, 0) }

// BenchmarkScrape10kJobs (issue 31 item 3): the scrape of a node with
// 10,000 jobs whose job server runs 10,000 of them (the lag metrics over
// every one; max_jobs is 500 by default): ms/scrape and bytes/scrape of
// the text exposition, which must stay under 50 ms and 100 KB.
func BenchmarkScrape10kJobs(b *testing.B) { benchScrape(b, 10_000, 10_000) }

// benchScrape scrapes the metrics of n jobs in a bolt queue, with the lags
// of running jobs.
func benchScrape(b *testing.B, n, running int) {
	ctx := context.Background()
	store, err := kv.OpenBolt(filepath.Join(b.TempDir(), "jobs.db"), kv.BoltOptions{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	q, err := jobs.New(store, jobs.Options{Prefix: []byte(jobstore.QueuePrefix)})
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	if err := q.SetTypeTimeout(ctx, jobdata.JobType, time.Minute); err != nil {
		b.Fatal(err)
	}
	rep := &parse.Rep{Source: parse.Endpoint{URL: "http://127.0.0.1:5984/src/"}, Target: parse.Endpoint{URL: "http://127.0.0.1:5984/tgt/"}, Continuous: true}
	start := time.Now()
	for done := 0; done < n; done += 5000 {
		if err := q.Transact(ctx, func(tx *jobs.Tx) error {
			for i := done; i < done+5000; i++ {
				id := fmt.Sprintf("d%06d", i)
				if err := jobstore.Put(tx, testKeys, parse.PersistentJobID("uuid", id), jobdata.New(rep, "_replicator", "uuid", id, start)); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("setup: %d jobs in %s", n, time.Since(start).Round(time.Millisecond))
	lags := make([]int64, running)
	for i := range lags {
		lags[i] = int64(i % 900)
	}
	sources := func() Sources {
		src := Sources{Records: jobstore.Records{Q: q, Keys: testKeys}, LagAlert: 5 * time.Minute}
		if running > 0 {
			src.Lags = func() []int64 { return lags }
		}
		return src
	}
	// A fresh collector counts the job states at every scrape; one kept
	// between scrapes reuses a count for a while (see Collector).
	b.Run("counted", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := NewRegistry(sources, nil).Gather(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/scrape")
	})
	b.Run("reused", func(b *testing.B) {
		reg := NewRegistry(sources, nil)
		mfs, _ := reg.Gather()
		var text bytes.Buffer
		for _, mf := range mfs {
			expfmt.MetricFamilyToText(&text, mf)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := reg.Gather(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/scrape")
		// After the loop: ResetTimer drops metrics reported before it.
		b.ReportMetric(float64(text.Len()), "bytes/scrape")
	})
}

// testKeys seals the job records of these tests.
var testKeys = seal.NewKeyring(seal.RandomKey())
