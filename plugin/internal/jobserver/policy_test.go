package jobserver

import (
	"strings"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/internal/jobdata"
)

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name    string
		rep     map[string]string
		shares  map[string]string
		check   func(Config) bool
		wantErr string
	}{
		{"defaults", nil, nil, func(c Config) bool {
			return c.MaxJobs == 500 && c.MaxChurn == 100 && c.Interval == 15*time.Second &&
				c.MaxHistory == 10 && c.MinBackoff == 32*time.Second && c.MaxAcceptors == 2 &&
				c.TransientMaxAge == 86400*time.Second && c.StatsUpdate == 10*time.Second
		}, ""},
		{"4.x names", map[string]string{"max_jobs": "3", "max_churn": "1", "interval_sec": "2", "health_threshold_sec": "5"}, nil,
			func(c Config) bool {
				return c.MaxJobs == 3 && c.MaxChurn == 1 && c.Interval == 2*time.Second && c.HealthThreshold == 5*time.Second
			}, ""},
		{"3.x interval ms", map[string]string{"interval": "60000", "health_threshold": "7"}, nil,
			func(c Config) bool { return c.Interval == time.Minute && c.HealthThreshold == 7*time.Second }, ""},
		{"4.x wins over 3.x", map[string]string{"interval": "60000", "interval_sec": "3"}, nil,
			func(c Config) bool { return c.Interval == 3*time.Second }, ""},
		{"bad value keeps default", map[string]string{"max_jobs": "lots", "max_churn": "7"}, nil,
			func(c Config) bool { return c.MaxJobs == 500 && c.MaxChurn == 7 }, `max_jobs="lots"`},
		{"negative rejected", map[string]string{"max_history": "0"}, nil,
			func(c Config) bool { return c.MaxHistory == 10 }, "max_history"},
		{"shares", nil, map[string]string{"a/_replicator": "200", "b/_replicator": "5000"},
			func(c Config) bool { return c.SharesOf("a/_replicator") == 200 && c.SharesOf("b/_replicator") == 100 }, "shares b/_replicator"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConfig(tt.rep, tt.shares)
			if tt.wantErr == "" && err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("error %v, want it to mention %q", err, tt.wantErr)
			}
			if !tt.check(c) {
				t.Fatalf("config %+v", c)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	cfg := DefaultConfig()
	lowest := func(int64) int64 { return 0 }
	highest := func(n int64) int64 { return n - 1 }
	tests := []struct {
		errs     int
		min, max time.Duration
	}{
		{0, 25 * time.Second, 33 * time.Second},
		{1, 49 * time.Second, 65 * time.Second}, // W=64: 0.75W+1 … W+1
		{2, 97 * time.Second, 129 * time.Second},
		{12, 98305 * time.Second, 131073 * time.Second},
		{50, 98305 * time.Second, 131073 * time.Second}, // capped at 2^12
	}
	for _, tt := range tests {
		lo, hi := Backoff(tt.errs, cfg, lowest), Backoff(tt.errs, cfg, highest)
		if lo != tt.min || hi != tt.max {
			t.Errorf("errors %d: backoff range [%v, %v], want [%v, %v]", tt.errs, lo, hi, tt.min, tt.max)
		}
	}
	small := cfg
	small.MinBackoff, small.MaxBackoff = time.Second, 8*time.Second // Min raised to 2, cap 2^2
	if got := Backoff(10, small, highest); got != 9*time.Second {
		t.Errorf("small window: %v, want 9s", got)
	}
	for i := 0; i < 100; i++ { // random draws stay in range
		if d := Backoff(1, cfg, nil); d < 49*time.Second || d > 65*time.Second {
			t.Fatalf("random backoff %v out of [49s,65s]", d)
		}
	}
}

func TestHeal(t *testing.T) {
	now := time.Unix(10000, 0)
	tests := []struct {
		name      string
		errs      int
		lastStart time.Time
		want      int
	}{
		{"never started", 3, time.Time{}, 3},
		{"crashed quickly", 3, now.Add(-30 * time.Second), 3},
		{"ran healthy", 3, now.Add(-121 * time.Second), 0},
		{"exactly threshold", 2, now.Add(-120 * time.Second), 2},
	}
	for _, tt := range tests {
		if got := Heal(tt.errs, tt.lastStart, now, 120*time.Second); got != tt.want {
			t.Errorf("%s: %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestAppendHistory(t *testing.T) {
	ev := func(typ string, ts int64) jobdata.Event { return jobdata.Event{Type: typ, Timestamp: ts} }
	var h []jobdata.Event
	h = AppendHistory(h, ev("added", 1), 3)
	h = AppendHistory(h, ev("started", 2), 3)
	h = AppendHistory(h, ev("crashed", 3), 3)
	h = AppendHistory(h, ev("started", 4), 3)
	want := []string{"started@4", "crashed@3", "started@2"}
	if len(h) != len(want) {
		t.Fatalf("history %v", h)
	}
	for i, e := range h {
		if got := e.Type + "@" + string(rune('0'+e.Timestamp)); got != want[i] {
			t.Errorf("history[%d] = %s, want %s", i, got, want[i])
		}
	}
}

func TestTrim(t *testing.T) {
	now := time.Unix(100000, 0)
	at := func(ago time.Duration) time.Time { return now.Add(-ago) }
	workers := []Worker{
		{ID: "young", Continuous: true, Started: at(10 * time.Second)},
		{ID: "old", Continuous: true, Started: at(time.Hour)},
		{ID: "older-oneshot", Continuous: false, Started: at(2 * time.Hour)},
		{ID: "mid", Continuous: true, Started: at(10 * time.Minute)},
		{ID: "greedy", Continuous: true, Started: at(2 * time.Minute), Priority: 50},
	}
	tests := []struct {
		name    string
		maxJobs int
		lowered bool
		want    []string
	}{
		{"room for all", 5, false, nil},
		{"one over", 4, false, []string{"greedy"}},
		{"two over", 3, false, []string{"greedy", "old"}},
		{"only eligible ones", 0, false, []string{"greedy", "old", "mid"}},
		{"lowered max_jobs stops one-shots last", 0, true, []string{"greedy", "old", "mid", "older-oneshot", "young"}},
		{"lowered prefers eligible continuous", 2, true, []string{"greedy", "old", "mid"}},
	}
	for _, tt := range tests {
		got := Trim(workers, tt.maxJobs, time.Minute, now, tt.lowered)
		if strings.Join(got, ",") != strings.Join(tt.want, ",") {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestAcceptorCounts(t *testing.T) {
	tests := []struct {
		name                                        string
		maxJobs, maxChurn, churn, acc, wrk, pending int
		want                                        int
	}{
		{"nothing pending", 10, 5, 0, 2, 10, 0, 0},
		{"rotation in", 10, 5, 0, 2, 10, 100, 3},
		{"churn used up", 10, 5, 5, 0, 10, 100, 0},
		{"churn partly used", 10, 5, 3, 0, 10, 100, 2},
		{"few pending", 10, 5, 0, 0, 10, 1, 1},
		{"over max+churn", 10, 5, 0, 2, 14, 100, 0},
		{"max_jobs 0 starts nothing", 0, 5, 0, 0, 0, 100, 0},
		{"rotation only replaces running jobs", 3, 20, 0, 0, 1, 100, 3},
	}
	for _, tt := range tests {
		if got := ExtraAcceptors(tt.maxJobs, tt.maxChurn, tt.churn, tt.acc, tt.wrk, tt.pending); got != tt.want {
			t.Errorf("%s: %d, want %d", tt.name, got, tt.want)
		}
	}
	if got := WantAcceptors(10, 2, 9); got != 1 {
		t.Errorf("WantAcceptors near max_jobs: %d, want 1", got)
	}
	if got := WantAcceptors(10, 2, 3); got != 2 {
		t.Errorf("WantAcceptors: %d, want 2", got)
	}
	if got := WantAcceptors(1, 2, 4); got != 0 {
		t.Errorf("WantAcceptors over max_jobs: %d, want 0", got)
	}
}

func TestShare(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Shares = map[string]int{"big/_replicator": 400}
	s := NewShare()
	iv := 10 * time.Second
	// Both dbs run one job for a whole interval, twice.
	for i := 0; i < 2; i++ {
		s.Cycle([]ShareJob{
			{ID: "a1", Key: "_replicator", Ran: iv},
			{ID: "b1", Key: "big/_replicator", Ran: iv},
		}, iv, cfg)
	}
	pa, pb := s.Priority("a1", "_replicator", 1, cfg), s.Priority("b1", "big/_replicator", 1, cfg)
	if !(pa > pb && pb > 0) {
		t.Fatalf("priorities a=%v b=%v: the db with more shares should have the lower priority", pa, pb)
	}
	// A new job of a busy db does not start at 0.
	if p := s.Priority("a2", "_replicator", 2, cfg); p <= 0 {
		t.Fatalf("new job priority %v, want > 0", p)
	}
	// Usage decays when nothing runs; jobs that stopped are forgotten.
	u := s.Usage("_replicator")
	s.Cycle(nil, iv, cfg)
	if got := s.Usage("_replicator"); got != u*0.5 {
		t.Fatalf("usage after idle cycle %v, want %v", got, u*0.5)
	}
	if p := s.Priority("a1", "_replicator", 1, cfg); p != s.increment("_replicator", 1, cfg) {
		t.Fatalf("stopped job kept its priority %v", p)
	}
	// Over-charged run time is bounded by the interval.
	s2 := NewShare()
	s2.Cycle([]ShareJob{{ID: "x", Key: "k", Ran: time.Hour}}, iv, cfg)
	if got := s2.Usage("k"); got != float64(iv.Microseconds()) {
		t.Fatalf("usage %v, want %v", got, float64(iv.Microseconds()))
	}
}
