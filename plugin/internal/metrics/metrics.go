// Package metrics is the replicator's Prometheus collector. It reads, at
// scrape time, the job records (job states), the totals of the
// replication runs (replicate.Group), the event counts of the
// replicator's components (their Stats) and the HTTP counters of the
// couchclient pool. Metrics CouchDB 3 also has keep its names as
// CouchDB's `/_node/_local/_prometheus` renders them
// (couchdb_couch_replicator_*, counters with a _total suffix); the others
// are couchepi_replicator_*.
package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/couchepi/couchepi/plugin/couchclient"
	"github.com/couchepi/couchepi/plugin/internal/frontend"
	"github.com/couchepi/couchepi/plugin/internal/jobdata"
	"github.com/couchepi/couchepi/plugin/internal/jobserver"
	"github.com/couchepi/couchepi/plugin/internal/jobstore"
	"github.com/couchepi/couchepi/plugin/internal/park"
	"github.com/couchepi/couchepi/plugin/replicate"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Sources are what the collector reads at each scrape. A zero Records.Q or
// a nil Pool (the replicator is not started) leaves their metrics out; a
// nil component counts nothing yet (its counters are 0).
type Sources struct {
	Records jobstore.Records
	Pool    *couchclient.Pool
	// Runs is the group of the replications this node runs.
	Runs *replicate.Group
	// Frontend, Server and Waker are the components whose event counts
	// (their Stats) are reported.
	Frontend *frontend.Frontend
	Server   *jobserver.Server
	Waker    *park.Waker
	// Lags returns the lag (jobdata.Stats.LagSec) of every job this node
	// runs; nil on a node that runs none.
	Lags func() []int64
	// LagAlert is lag_alert_sec: jobs lagging at least this long are
	// counted in couchepi_replicator_jobs_lagging.
	LagAlert time.Duration
}

// foldTimeout bounds the walk over the job records of one scrape.
const foldTimeout = 5 * time.Second

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

// CouchDB's names (src/couch_replicator/priv/stats_descriptions.cfg).
var (
	jobsRunning = desc("couchdb_couch_replicator_jobs_running", "replicator scheduler running jobs")
	jobsPending = desc("couchdb_couch_replicator_jobs_pending", "replicator scheduler pending jobs")
	jobsCrashed = desc("couchdb_couch_replicator_jobs_crashed", "replicator scheduler crashed jobs")
	jobsTotal   = desc("couchdb_couch_replicator_jobs_total", "total number of replicator scheduler jobs")

	checkpointsSuccess = desc("couchdb_couch_replicator_checkpoints_success_total", "number of checkpoints successfully saved")
	checkpointsFailure = desc("couchdb_couch_replicator_checkpoints_failure_total", "number of failed checkpoint saves")
	requests           = desc("couchdb_couch_replicator_requests_total", "number of HTTP requests made by the replicator")
	responsesSuccess   = desc("couchdb_couch_replicator_responses_success_total", "number of successful HTTP responses received by the replicator")
	responsesFailure   = desc("couchdb_couch_replicator_responses_failure_total", "number of failed HTTP responses received by the replicator")

	jobsAdds            = desc("couchdb_couch_replicator_jobs_adds_total", "number of jobs added to replicator scheduler")
	jobsDuplicateAdds   = desc("couchdb_couch_replicator_jobs_duplicate_adds_total", "number of duplicate jobs added to replicator scheduler")
	jobsRemoves         = desc("couchdb_couch_replicator_jobs_removes_total", "number of jobs removed from replicator scheduler")
	jobsStarts          = desc("couchdb_couch_replicator_jobs_starts_total", "number of jobs started by replicator scheduler")
	jobsStops           = desc("couchdb_couch_replicator_jobs_stops_total", "number of jobs stopped by replicator scheduler")
	jobsCrashes         = desc("couchdb_couch_replicator_jobs_crashes_total", "number of job crashed noticed by replicator scheduler")
	failedStarts        = desc("couchdb_couch_replicator_failed_starts_total", "number of replications that have failed to start")
	changesReadFailures = desc("couchdb_couch_replicator_changes_read_failures_total", "number of failed replicator changes read failures")
	workersStarted      = desc("couchdb_couch_replicator_workers_started_total", "number of replicator workers started")
	dbScans             = desc("couchdb_couch_replicator_db_scans_total", "number of times replicator db scans have been started")
	completedUpdates    = desc("couchdb_couch_replicator_docs_completed_state_updates_total", "number of 'completed' state document updates")
	failedUpdates       = desc("couchdb_couch_replicator_docs_failed_state_updates_total", "number of 'failed' state document updates")
	connectionCreates   = desc("couchdb_couch_replicator_connection_creates_total", "number of connections created")
)

// couchepi's own (CouchDB keeps these per job only, in _active_tasks and
// _scheduler/jobs).
var (
	jobsByState      = desc("couchepi_replicator_jobs", "Replication jobs by state (pending, running, crashing, completed, failed), as _scheduler/jobs shows them.", "state")
	docsRead         = desc("couchepi_replicator_docs_read_total", "Documents read from sources by all replications.")
	docsWritten      = desc("couchepi_replicator_docs_written_total", "Documents written to targets by all replications.")
	docWriteFailures = desc("couchepi_replicator_doc_write_failures_total", "Documents a target refused (doc_write_failures) in all replications.")
	failuresByReason = desc("couchepi_replicator_doc_write_failures_by_reason_total", "Documents a target refused, or the replicator skipped, by kind: forbidden, unauthorized, too_large, conflict, bad_request, missing_stub, id_too_long, other.", "reason")
	revsChecked      = desc("couchepi_replicator_revisions_checked_total", "Revisions checked against targets with _revs_diff.")
	missingFound     = desc("couchepi_replicator_missing_revisions_found_total", "Revisions targets were missing.")
	changesRead      = desc("couchepi_replicator_changes_read_total", "Rows read from source _changes feeds.")
	tooManyRequests  = desc("couchepi_replicator_responses_too_many_requests_total", "HTTP 429 responses received by the replicator.")
	backoffs         = desc("couchepi_replicator_rate_limiter_backoffs_total", "Requests the AIMD rate limiter delayed after 429s.")
	maxBackoffs      = desc("couchepi_replicator_max_backoffs_total", "Requests given up with max_backoff.")
	retries          = desc("couchepi_replicator_request_retries_total", "HTTP requests retried after a 408, 5xx or connection failure.")
	parks            = desc("couchepi_replicator_jobs_parks_total", "Continuous jobs parked (caught up and idle) until their source changes.")
	wakes            = desc("couchepi_replicator_jobs_wakes_total", "Parked jobs woken because their source changed.")
	handoffs         = desc("couchepi_replicator_jobs_slot_handoffs_total", "Slots handed on by caught-up continuous jobs to jobs waiting for one.")
	resumes          = desc("couchepi_replicator_jobs_resumes_total", "Woken jobs started from what their parked run left, with one request instead of four.")
	sharedReads      = desc("couchepi_replicator_shared_changes_reads_total", "Reads of a source's changes served by another replication's read of it.")
	sharedDocs       = desc("couchepi_replicator_shared_docs_total", "Revisions served from another replication's fetch of the same source.")
	batchWaits       = desc("couchepi_replicator_batch_waits_total", "Batches that waited for their turn to be written to their target server (max_batches_per_host).")
	hostWaits        = desc("couchepi_replicator_host_budget_waits_total", "Requests that waited for their server's budget (max_requests_per_host, its congestion window or a Retry-After hold).")
	hostHolds        = desc("couchepi_replicator_host_retry_after_holds_total", "429 and 503 answers whose Retry-After held every request to their server.")
	hostCuts         = desc("couchepi_replicator_host_congestion_cuts_total", "Cuts of a server's congestion window after a 429 or 503 (at most one per round of requests).")
	hostWaiting      = desc("couchepi_replicator_host_budget_waiting", "Requests waiting for their server's budget now.")
	hostsHeld        = desc("couchepi_replicator_hosts_held", "Servers whose requests a Retry-After holds now.")
	hostsCongested   = desc("couchepi_replicator_hosts_congested", "Servers whose requests share a congestion window now (they answered 429 or 503).")
	stalls           = desc("couchepi_replicator_jobs_stalls_total", "Replications restarted because they were behind their source and completed no batch for stall_timeout_sec.")
	lagSeconds       = desc("couchepi_replicator_lag_seconds", "How long the jobs this node runs have been behind their sources (0: caught up), across jobs.")
	lagMax           = desc("couchepi_replicator_lag_max_seconds", "The longest lag of the jobs this node runs.")
	jobsLagging      = desc("couchepi_replicator_jobs_lagging", "Jobs this node runs that have been behind their source for at least lag_alert_sec.")
)

// lagBuckets are the upper bounds (s) of couchepi_replicator_lag_seconds.
var lagBuckets = []float64{1, 5, 15, 60, 300, 900, 3600, 14400}

var allDescs = []*prometheus.Desc{
	jobsRunning, jobsPending, jobsCrashed, jobsTotal,
	checkpointsSuccess, checkpointsFailure, requests, responsesSuccess, responsesFailure,
	jobsAdds, jobsDuplicateAdds, jobsRemoves, jobsStarts, jobsStops, jobsCrashes, failedStarts,
	changesReadFailures, workersStarted, dbScans, completedUpdates, failedUpdates, connectionCreates,
	jobsByState, docsRead, docsWritten, docWriteFailures, failuresByReason, revsChecked, missingFound, changesRead,
	tooManyRequests, backoffs, maxBackoffs, retries, parks, wakes, handoffs, resumes, sharedReads, sharedDocs, batchWaits,
	hostWaits, hostHolds, hostCuts, hostWaiting, hostsHeld, hostsCongested,
	stalls, lagSeconds, lagMax, jobsLagging,
}

// Collector is a prometheus.Collector of the replicator's metrics.
type Collector struct {
	sources func() Sources
	log     hclog.Logger

	// The job-state gauges fold over every job record (122 ms for 100,000
	// jobs in bolt, BenchmarkScrape100kJobs), so a count is reused for
	// statesReuse times as long as it took to make: scrapes and _stats
	// reads stay at most about 2 % of a core, and at a few jobs the count
	// is a few milliseconds old.
	statesMu   sync.Mutex
	states     map[string]int
	statesFrom time.Time // when states was counted
	statesTook time.Duration
}

// statesReuse and maxStatesAge bound how long a job-state count is reused.
const (
	statesReuse  = 50
	maxStatesAge = 10 * time.Second
)

// countStates returns the job-state counts, counted again when the last
// count is older than statesReuse times its cost.
func (c *Collector) countStates(recs jobstore.Records) (map[string]int, error) {
	c.statesMu.Lock()
	defer c.statesMu.Unlock()
	if c.states != nil && time.Since(c.statesFrom) < min(statesReuse*c.statesTook, maxStatesAge) {
		return c.states, nil
	}
	start := time.Now()
	states, err := CountStates(recs)
	if err != nil {
		return nil, err
	}
	c.states, c.statesFrom, c.statesTook = states, start, time.Since(start)
	return states, nil
}

// New returns a Collector that calls sources at every scrape.
func New(sources func() Sources, log hclog.Logger) *Collector {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Collector{sources: sources, log: log}
}

// NewRegistry returns a registry holding a Collector over sources and the
// Go runtime's metrics of the plugin process (goroutines, memory, GC; the
// host labels them with the plugin's name, apart from the server's own).
func NewRegistry(sources func() Sources, log hclog.Logger) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(New(sources, log), collectors.NewGoCollector())
	return reg
}

// Describe sends every descriptor of the collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

// Collect sends the current values.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}

	src := c.sources()
	var t replicate.Totals
	if src.Runs != nil {
		t = src.Runs.Stats()
	}
	counter(checkpointsSuccess, float64(t.CheckpointsSuccess))
	counter(checkpointsFailure, float64(t.CheckpointsFailure))
	counter(docsRead, float64(t.DocsRead))
	counter(docsWritten, float64(t.DocsWritten))
	counter(docWriteFailures, float64(t.DocWriteFailures))
	for _, r := range replicate.WriteFailureReasons() { // every kind, 0 included: a fixed set of series
		counter(failuresByReason, float64(t.DocWriteFailuresByReason[r]), r)
	}
	counter(revsChecked, float64(t.RevisionsChecked))
	counter(missingFound, float64(t.MissingFound))
	counter(changesRead, float64(t.ChangesRead))
	counter(changesReadFailures, float64(t.ChangesReadFailures))
	counter(workersStarted, float64(t.WorkersStarted))
	counter(resumes, float64(t.Resumes))
	counter(sharedReads, float64(t.SharedReads))
	counter(sharedDocs, float64(t.SharedDocs))
	counter(stalls, float64(t.Stalls))

	var (
		fc frontend.Stats
		jc jobserver.Stats
		pc park.Stats
	)
	if src.Frontend != nil {
		fc = src.Frontend.Stats()
	}
	if src.Server != nil {
		jc = src.Server.Stats()
	}
	if src.Waker != nil {
		pc = src.Waker.Stats()
	}
	counter(jobsAdds, float64(fc.JobsAdded))
	counter(jobsRemoves, float64(fc.JobsRemoved))
	counter(dbScans, float64(fc.DBScans))
	counter(jobsDuplicateAdds, float64(jc.DuplicateAdds))
	counter(jobsStarts, float64(jc.Starts))
	counter(jobsStops, float64(jc.Stops))
	counter(jobsCrashes, float64(jc.Crashes))
	counter(failedStarts, float64(jc.FailedStarts))
	counter(completedUpdates, float64(jc.CompletedStateUpdates))
	counter(failedUpdates, float64(jc.FailedStateUpdates))
	counter(parks, float64(jc.Parks))
	counter(wakes, float64(pc.Wakes))
	counter(handoffs, float64(jc.Handoffs))

	if src.Lags != nil {
		lagMetrics(ch, src.Lags(), src.LagAlert)
	}
	if src.Pool != nil {
		s := src.Pool.Stats()
		counter(requests, float64(s.Requests))
		counter(responsesSuccess, float64(s.ResponsesSuccess))
		counter(responsesFailure, float64(s.ResponsesFailure))
		counter(tooManyRequests, float64(s.TooManyRequests))
		counter(backoffs, float64(s.Backoffs))
		counter(maxBackoffs, float64(s.MaxBackoffs))
		counter(retries, float64(s.Retries))
		counter(connectionCreates, float64(s.ConnectionsCreated))
		counter(batchWaits, float64(s.BatchWaits))
		counter(hostWaits, float64(s.HostWaits))
		counter(hostHolds, float64(s.HostHolds))
		counter(hostCuts, float64(s.HostCuts))
		// Kept as requests come and go: the same cost however many jobs
		// or servers there are.
		b := src.Pool.BudgetState()
		gauge(hostWaiting, float64(b.Waiting))
		gauge(hostsHeld, float64(b.HostsHeld))
		gauge(hostsCongested, float64(b.HostsCongested))
	}
	if src.Records.Q != nil {
		states, err := c.countStates(src.Records)
		if err != nil {
			c.log.Warn("metrics: reading job states", "error", err)
			return
		}
		total := 0
		for _, st := range jobdata.States() {
			gauge(jobsByState, float64(states[st]), st)
			total += states[st]
		}
		gauge(jobsRunning, float64(states[jobdata.Running]))
		gauge(jobsPending, float64(states[jobdata.Pending]))
		gauge(jobsCrashed, float64(states[jobdata.Crashing]))
		gauge(jobsTotal, float64(total))
	}
}

// lagMetrics sends the lag histogram, the longest lag and the count of
// jobs lagging past alert: a fixed handful of series however many jobs
// run (no label per job).
func lagMetrics(ch chan<- prometheus.Metric, lags []int64, alert time.Duration) {
	buckets := make(map[float64]uint64, len(lagBuckets))
	var sum float64
	var most int64
	lagging := 0
	for _, l := range lags {
		sum += float64(l)
		most = max(most, l)
		for _, b := range lagBuckets {
			if float64(l) <= b {
				buckets[b]++
			}
		}
		if alert > 0 && time.Duration(l)*time.Second >= alert {
			lagging++
		}
	}
	ch <- prometheus.MustNewConstHistogram(lagSeconds, uint64(len(lags)), sum, buckets)
	ch <- prometheus.MustNewConstMetric(lagMax, prometheus.GaugeValue, float64(most))
	ch <- prometheus.MustNewConstMetric(jobsLagging, prometheus.GaugeValue, float64(lagging))
}

// CountStates counts the replication jobs per state.
func CountStates(recs jobstore.Records) (map[string]int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), foldTimeout)
	defer cancel()
	return recs.CountStates(ctx)
}
