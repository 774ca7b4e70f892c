// Package jobserver runs replication jobs from the jobs queue the way CouchDB
// 4.x's couch_replicator_job_server does: acceptors take due jobs up to
// max_jobs, every interval the longest-running continuous jobs make room for
// up to max_churn pending ones, crashing jobs back off exponentially, and
// terminal states are written back to the replication docs.
package jobserver

import (
	"fmt"

	"github.com/couchepi/couchepi/plugin/jobs"
	"github.com/couchepi/couchepi/plugin/replicate"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Config is the job server's part of the `[replicator]` config section
// (4.x names and defaults; the 3.x names `interval` (ms) and
// `health_threshold` are read when the 4.x ones are absent) plus the
// `[replicator.shares]` section used by fair share.
type Config struct {
	MaxJobs         int           // max_jobs: running jobs per node
	MaxChurn        int           // max_churn: jobs started/stopped per interval
	MaxAcceptors    int           // max_acceptors: concurrent acceptors
	Interval        time.Duration // interval_sec: scheduling cycle
	MinRunTime      time.Duration // min_run_time_sec: a continuous job runs at least this long before rotation
	MaxHistory      int           // max_history: events kept per job
	HealthThreshold time.Duration // health_threshold_sec: running this long resets error_count
	MinBackoff      time.Duration // min_backoff_penalty_sec
	MaxBackoff      time.Duration // max_backoff_penalty_sec
	StartupJitter   time.Duration // startup_jitter (ms): acceptor retry jitter
	TransientMaxAge time.Duration // transient_job_max_age_sec: finished transient jobs kept this long
	StatsUpdate     time.Duration // stats_update_interval_sec: stats push and heartbeat period
	// ActivityTimeout is activity_timeout_sec (couchepi's; CouchDB fixes
	// 61 s): a running job not renewed for this long is re-enqueued by the
	// queue's monitor, and its runner abandons it after half of it.
	ActivityTimeout time.Duration
	// NodeLease is node_lease_sec (couchepi's): a replication node's
	// lease on the job queue lives this long without renewal; then any
	// node re-enqueues the node's jobs. The node renews it every tenth
	// of it and stops writing for its jobs after half of it without a
	// renewal (see package jobs, Lease).
	NodeLease time.Duration
	// StallTimeout is stall_timeout_sec (couchepi's; 0 = no watch): a
	// running job behind its source that completes no batch for this
	// long is restarted, with a "stalled" event (replicate.Options.StallTimeout).
	StallTimeout time.Duration
	// LagAlert is lag_alert_sec (couchepi's): jobs behind their source
	// for at least this long count in the jobs_lagging metric.
	LagAlert time.Duration
	// IdlePark is idle_park_sec (couchepi's; 0 = never): a continuous job
	// caught up and idle this long is parked until its source changes,
	// giving up its slot and its changes feed (see package park).
	IdlePark      time.Duration
	UsageCoeff    float64        // usage_coeff (fair share)
	PriorityCoeff float64        // priority_coeff (fair share)
	Shares        map[string]int // [replicator.shares] key -> 1..1000
}

// DefaultShares is the share of a replicator db or user not listed in `[replicator.shares]`.
const DefaultShares = 100

// DefaultConfig returns CouchDB's defaults.
func DefaultConfig() Config {
	return Config{
		MaxJobs:         500,
		MaxChurn:        100,
		MaxAcceptors:    2,
		Interval:        15 * time.Second,
		MinRunTime:      60 * time.Second,
		MaxHistory:      10,
		HealthThreshold: 120 * time.Second,
		MinBackoff:      32 * time.Second,
		MaxBackoff:      172800 * time.Second,
		StartupJitter:   5000 * time.Millisecond,
		TransientMaxAge: 86400 * time.Second,
		StatsUpdate:     10 * time.Second,
		ActivityTimeout: TypeTimeout,
		NodeLease:       jobs.DefaultLeaseTTL,
		StallTimeout:    replicate.DefaultStallTimeout,
		LagAlert:        5 * time.Minute,
		IdlePark:        60 * time.Second,
		UsageCoeff:      0.5,
		PriorityCoeff:   0.98,
		Shares:          map[string]int{},
	}
}

// ParseConfig reads the `[replicator]` and `[replicator.shares]` sections.
// Keys that are absent keep their defaults. A malformed value keeps its
// default too, and is named in the returned error (the config is still usable).
func ParseConfig(replicator, shares map[string]string) (Config, error) {
	c := DefaultConfig()
	var bad []string
	intKey := func(dst *int, key string, min int) {
		v, ok := replicator[key]
		if !ok {
			return
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < min {
			bad = append(bad, fmt.Sprintf("%s=%q", key, v))
			return
		}
		*dst = n
	}
	durKey := func(dst *time.Duration, key string, unit time.Duration, min int) bool {
		var n int = -1
		intKey(&n, key, min)
		if n < min {
			return false
		}
		*dst = time.Duration(n) * unit
		return true
	}
	floatKey := func(dst *float64, key string) {
		v, ok := replicator[key]
		if !ok {
			return
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || f < 0 || f > 1 {
			bad = append(bad, fmt.Sprintf("%s=%q", key, v))
			return
		}
		*dst = f
	}
	intKey(&c.MaxJobs, "max_jobs", 0)
	intKey(&c.MaxChurn, "max_churn", 0)
	intKey(&c.MaxAcceptors, "max_acceptors", 1)
	intKey(&c.MaxHistory, "max_history", 1)
	if !durKey(&c.Interval, "interval_sec", time.Second, 1) {
		durKey(&c.Interval, "interval", time.Millisecond, 1)
	}
	durKey(&c.MinRunTime, "min_run_time_sec", time.Second, 0)
	if !durKey(&c.HealthThreshold, "health_threshold_sec", time.Second, 1) {
		durKey(&c.HealthThreshold, "health_threshold", time.Second, 1)
	}
	durKey(&c.MinBackoff, "min_backoff_penalty_sec", time.Second, 1)
	durKey(&c.MaxBackoff, "max_backoff_penalty_sec", time.Second, 1)
	durKey(&c.StartupJitter, "startup_jitter", time.Millisecond, 0)
	durKey(&c.TransientMaxAge, "transient_job_max_age_sec", time.Second, 0)
	durKey(&c.StatsUpdate, "stats_update_interval_sec", time.Second, 1)
	durKey(&c.ActivityTimeout, "activity_timeout_sec", time.Second, 2)
	durKey(&c.NodeLease, "node_lease_sec", time.Second, 2)
	durKey(&c.StallTimeout, "stall_timeout_sec", time.Second, 0)
	durKey(&c.LagAlert, "lag_alert_sec", time.Second, 1)
	durKey(&c.IdlePark, "idle_park_sec", time.Second, 0)
	floatKey(&c.UsageCoeff, "usage_coeff")
	floatKey(&c.PriorityCoeff, "priority_coeff")
	for k, v := range shares {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 || n > 1000 {
			bad = append(bad, fmt.Sprintf("shares %s=%q", k, v))
			continue
		}
		c.Shares[k] = n
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return c, fmt.Errorf("invalid [replicator] values kept at their defaults: %s", strings.Join(bad, ", "))
	}
	return c, nil
}

// SharesOf returns the configured shares of a fair-share key (a replicator
// db name, or a user name for transient jobs).
func (c Config) SharesOf(key string) int {
	if n, ok := c.Shares[key]; ok {
		return n
	}
	return DefaultShares
}
