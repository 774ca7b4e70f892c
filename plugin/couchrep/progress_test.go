package main

import (
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
		{name: "known one-shot", v: view{Stats: replicate.Stats{DocsWritten: 42000, ChangesPending: ptr(58000)},
			DocsPerSec: 8120.4, Fraction: 0.42, ETA: 7 * time.Second, Known: true, Elapsed: 5 * time.Second},
			want: []string{"[================>", "  42%", "42,000 docs", "8,120 docs/s", "pending 58,000", "ETA 7s"}},
		{name: "continuous has no ETA", v: view{Stats: replicate.Stats{DocsWritten: 10, ChangesPending: ptr(0)}, Elapsed: 90 * time.Second},
			want: []string{"[-]", "10 docs", "pending 0", "1m30s"}, not: []string{"ETA", "%"}},
		{name: "unknown pending", v: view{Stats: replicate.Stats{DocsWritten: 1}}, want: []string{"1 docs"}, not: []string{"pending", "ETA"}},
		{name: "failures shown", v: view{Stats: replicate.Stats{DocWriteFailures: 3}}, want: []string{"failed 3"}},
		{name: "done", v: view{Stats: replicate.Stats{DocsWritten: 5, ChangesPending: ptr(0)}, Fraction: 1, Known: true},
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
	m := newMeter(t0, false)
	m.update(t0.Add(2*time.Second), replicate.Stats{DocsWritten: 2000, RevisionsChecked: 2000, ChangesPending: ptr(8000)})
	v := m.view(t0.Add(2 * time.Second))
	if v.DocsPerSec != 1000 || !v.Known || v.Fraction != 0.2 || v.ETA != 8*time.Second {
		t.Errorf("view %+v", v)
	}
	m.update(t0.Add(4*time.Second), replicate.Stats{DocsWritten: 10000, RevisionsChecked: 10000, ChangesPending: ptr(0)})
	if v := m.view(t0.Add(4 * time.Second)); v.Fraction != 1 || v.ETA != 0 {
		t.Errorf("finished view %+v", v)
	}
	c := newMeter(t0, true)
	c.update(t0.Add(time.Second), replicate.Stats{DocsWritten: 5, RevisionsChecked: 5, ChangesPending: ptr(10)})
	if v := c.view(t0.Add(time.Second)); v.Known || v.ETA != 0 {
		t.Errorf("continuous view has an ETA: %+v", v)
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
