package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/replicate"
)

func ptr(n int64) *int64 { return &n }

func TestRenderBar(t *testing.T) {
	tests := []struct {
		name string
		v    view
		want []string // substrings
		not  []string
	}{
		{name: "known one-shot", v: view{Stats: replicate.Stats{DocsWritten: 42000, ChangesPending: ptr(99999)}, Pending: ptr(58000),
			DocsPerSec: 8120.4, Fraction: 0.42, ETA: 7 * time.Second, Known: true, Elapsed: 5 * time.Second},
			want: []string{"[================>", "  42%", "42,000 docs", "8,120 docs/s", "pending 58,000", "ETA 7s"}},
		{name: "continuous has no ETA", v: view{Stats: replicate.Stats{DocsWritten: 10, ChangesPending: ptr(0)}, Pending: ptr(0), Elapsed: 90 * time.Second},
			want: []string{"[-]", "10 docs", "pending 0", "1m30s"}, not: []string{"ETA", "%"}},
		{name: "unknown pending", v: view{Stats: replicate.Stats{DocsWritten: 1}}, want: []string{"1 docs"}, not: []string{"pending", "ETA"}},
		{name: "failures shown", v: view{Stats: replicate.Stats{DocWriteFailures: 3}}, want: []string{"failed 3"}},
		{name: "done", v: view{Stats: replicate.Stats{DocsWritten: 5, ChangesPending: ptr(0)}, Pending: ptr(0), Fraction: 1, Known: true},
			want: []string{"=]", "100%"}, not: []string{">"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			line := renderBar(tc.v, 100)
			if len(line) > 100 {
				t.Errorf("line wider than 100: %d", len(line))
			}
			for _, w := range tc.want {
				if !strings.Contains(line, w) {
					t.Errorf("%q lacks %q", line, w)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(line, n) {
					t.Errorf("%q has %q", line, n)
				}
			}
		})
	}
	if l := renderBar(view{Stats: replicate.Stats{ChangesPending: ptr(5)}, Known: true}, 30); len(l) > 30 {
		t.Errorf("narrow terminal: %d chars: %q", len(l), l)
	}
}

func TestMeter(t *testing.T) {
	t0 := time.Unix(1000, 0)
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	tests := []struct {
		name       string
		continuous bool
		since      json.RawMessage
		end        json.RawMessage   // the source's update_seq at the start
		stats      []replicate.Stats // one a second
		docsPerSec float64
		known      bool
		fraction   float64
		eta        time.Duration
		pending    int64 // -1 = nil
	}{
		{name: "numeric seqs from zero",
			stats: []replicate.Stats{
				{DocsWritten: 1000, ThroughSeq: raw("1000"), SourceSeq: raw("3000"), ChangesPending: ptr(7000), CheckpointedSourceSeq: raw("null")},
				{DocsWritten: 3000, ThroughSeq: raw("3000"), SourceSeq: raw("5000"), ChangesPending: ptr(5000), CheckpointedSourceSeq: raw("null")},
			},
			docsPerSec: 2000, known: true, fraction: 0.3, eta: 3500 * time.Millisecond, pending: 7000},
		{name: "CouchDB opaque seqs resumed from a checkpoint",
			stats: []replicate.Stats{
				{DocsWritten: 10, ThroughSeq: raw(`"1100-g1AAAA"`), SourceSeq: raw(`"1500-g1BBBB"`), ChangesPending: ptr(500), CheckpointedSourceSeq: raw(`"1000-g1CCCC"`)},
				{DocsWritten: 110, ThroughSeq: raw(`"1200-g1DDDD"`), SourceSeq: raw(`"1500-g1BBBB"`), ChangesPending: ptr(500), CheckpointedSourceSeq: raw(`"1000-g1CCCC"`)},
			},
			docsPerSec: 100, known: true, fraction: 0.2, eta: 8 * time.Second, pending: 800},
		{name: "since_seq is the start",
			since: raw("500"),
			stats: []replicate.Stats{{ThroughSeq: raw("750"), SourceSeq: raw("1000"), ChangesPending: ptr(0), CheckpointedSourceSeq: raw("null")}},
			known: true, fraction: 0.5, pending: 250},
		{name: "update_seq at the start beats a too small changes_pending",
			end: raw(`"10000-g1AAAA"`),
			stats: []replicate.Stats{
				{DocsWritten: 1000, ThroughSeq: raw(`"1000-g1A"`), SourceSeq: raw(`"1000-g1A"`), ChangesPending: ptr(0), CheckpointedSourceSeq: raw("null")},
				{DocsWritten: 2000, ThroughSeq: raw(`"2000-g1A"`), SourceSeq: raw(`"2000-g1A"`), ChangesPending: ptr(0), CheckpointedSourceSeq: raw("null")},
			},
			docsPerSec: 1000, known: true, fraction: 0.2, eta: 8 * time.Second, pending: 8000},
		{name: "update_seq at the start beats a stale changes_pending",
			end: raw("100000"),
			stats: []replicate.Stats{
				{DocsWritten: 16000, ThroughSeq: raw("16000"), SourceSeq: raw("16000"), ChangesPending: ptr(84000), CheckpointedSourceSeq: raw("null")},
				{DocsWritten: 90000, ThroughSeq: raw("90000"), SourceSeq: raw("90000"), ChangesPending: ptr(84000), CheckpointedSourceSeq: raw("null")},
			},
			docsPerSec: 74000, known: true, fraction: 0.9, eta: 135135135 * time.Nanosecond, pending: 10000},
		{name: "docs written after the start move the end",
			end:   raw("100"),
			stats: []replicate.Stats{{ThroughSeq: raw("120"), SourceSeq: raw("150"), ChangesPending: ptr(50), CheckpointedSourceSeq: raw("null")}},
			known: true, fraction: 0.6, pending: 80},
		{name: "update_seq known, changes_pending not",
			end:   raw("400"),
			stats: []replicate.Stats{{ThroughSeq: raw("100"), SourceSeq: raw("100"), CheckpointedSourceSeq: raw("null")}},
			known: true, fraction: 0.25, pending: 300},
		{name: "finished",
			stats:      []replicate.Stats{{DocsWritten: 5, ThroughSeq: raw("5"), SourceSeq: raw("5"), ChangesPending: ptr(0), CheckpointedSourceSeq: raw("null")}},
			docsPerSec: 5, known: true, fraction: 1, pending: 0},
		{name: "the first second has a rate",
			stats:      []replicate.Stats{{DocsWritten: 4000, ThroughSeq: raw("4000"), SourceSeq: raw("4000"), ChangesPending: ptr(6000), CheckpointedSourceSeq: raw("null")}},
			docsPerSec: 4000, known: true, fraction: 0.4, pending: 6000},
		{name: "a resumed run's first stats are no rate",
			stats: []replicate.Stats{{DocsWritten: 50000, ThroughSeq: raw("50000"), SourceSeq: raw("50000"), ChangesPending: ptr(0), CheckpointedSourceSeq: raw("50000")}},
			known: true, fraction: 1, pending: 0},
		{name: "unknown pending",
			stats: []replicate.Stats{{ThroughSeq: raw("5"), SourceSeq: raw("9"), CheckpointedSourceSeq: raw("null")}}, pending: -1},
		{name: "opaque seqs without a number",
			stats: []replicate.Stats{{ThroughSeq: raw(`"abc"`), SourceSeq: raw(`"def"`), ChangesPending: ptr(3), CheckpointedSourceSeq: raw("null")}}, pending: 3},
		{name: "continuous never has an ETA", continuous: true,
			stats: []replicate.Stats{
				{DocsWritten: 0, ThroughSeq: raw("1"), SourceSeq: raw("5"), ChangesPending: ptr(10), CheckpointedSourceSeq: raw("null")},
				{DocsWritten: 5, ThroughSeq: raw("5"), SourceSeq: raw("5"), ChangesPending: ptr(10), CheckpointedSourceSeq: raw("null")},
			},
			docsPerSec: 5, pending: 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newMeter(t0, tc.continuous, tc.since)
			if tc.end != nil {
				m.setEnd(tc.end)
			}
			now := t0
			for _, s := range tc.stats {
				now = now.Add(time.Second)
				m.update(now, s)
			}
			v := m.view(now)
			pending := int64(-1)
			if v.Pending != nil {
				pending = *v.Pending
			}
			if pending != tc.pending {
				t.Errorf("pending %d, want %d", pending, tc.pending)
			}
			if v.DocsPerSec != tc.docsPerSec || v.Known != tc.known || v.Fraction != tc.fraction || v.ETA != tc.eta {
				t.Errorf("got docs/s %v known %v fraction %v eta %v; want %v %v %v %v",
					v.DocsPerSec, v.Known, v.Fraction, v.ETA, tc.docsPerSec, tc.known, tc.fraction, tc.eta)
			}
		})
	}
}

func TestFormatting(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -4500: "-4,500"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
	for d, want := range map[time.Duration]string{850 * time.Millisecond: "850ms", 12 * time.Second: "12s",
		185 * time.Second: "3m05s", 62 * time.Minute: "1h02m"} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%v) = %q, want %q", d, got, want)
		}
	}
	for d, want := range map[time.Duration]string{697 * time.Millisecond: "1s", time.Second: "1s", 1001 * time.Millisecond: "2s",
		135 * time.Millisecond: "1s", 61500 * time.Millisecond: "1m02s"} {
		if got := etaString(d); got != want {
			t.Errorf("etaString(%v) = %q, want %q", d, got, want)
		}
	}
	for in, want := range map[string]string{
		"db_not_found: could not open http://admin:secret@h/db/": "db_not_found: could not open http://admin:*****@h/db/",
		"plain http://h/db/ text":                                "plain http://h/db/ text",
		"mail a@b.c":                                             "mail a@b.c",
	} {
		if got := redactText(in); got != want {
			t.Errorf("redactText(%q) = %q, want %q", in, got, want)
		}
	}
}
