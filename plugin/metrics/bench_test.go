package metrics

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/jobdata"
	"github.com/couchepi/couchepi/plugin/jobs"
	"github.com/couchepi/couchepi/plugin/kv"
)

// BenchmarkScrape100kJobs gathers the replicator's metrics (what one
// Prometheus scrape or one _stats read asks of the plugin) with 100,000
// job records in a bolt queue, and prints the time and memory of one
// scrape.
func BenchmarkScrape100kJobs(b *testing.B) {
	const n = 100_000
	ctx := context.Background()
	store, err := kv.OpenBolt(filepath.Join(b.TempDir(), "jobs.db"), kv.BoltOptions{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	q, err := jobs.New(store, jobs.Options{Prefix: jobdata.QueuePrefix})
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
				if err := jobdata.Put(tx, parse.PersistentJobID("uuid", id), jobdata.New(rep, "_replicator", "uuid", id, start)); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("setup: %d jobs in %s", n, time.Since(start).Round(time.Millisecond))
	sources := func() Sources { return Sources{Records: jobdata.Records{Q: q}} }
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
		reg.Gather()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := reg.Gather(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/scrape")
	})
}
