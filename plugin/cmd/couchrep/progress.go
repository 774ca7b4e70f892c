package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/couchepi/couchepi/plugin/replicate"
	"github.com/hashicorp/go-hclog"
)

// progress shows a running replication's stats as they change.
type progress interface {
	// Update records the newest stats (called by the engine, at most once a second).
	Update(replicate.Stats)
	// Tick redraws or logs if it is time to (called a few times a second).
	Tick(now time.Time)
	// Done clears the live display before the final summary is printed.
	Done()
}

// meter turns successive stats into rates and an ETA.
type meter struct {
	mu         sync.Mutex
	start      time.Time
	stats      replicate.Stats
	continuous bool

	// samples of (time, docs_written, numeric through_seq) for sliding-window rates.
	samples []sample
	// startSeq is the numeric seq the run started from (-1 = not yet known).
	startSeq int64
	// sinceSeq is the numeric since_seq option (-1 = none).
	sinceSeq int64
	// endSeq is the numeric update_seq of the source when the run started
	// (-1 = unknown): a one-shot replication stops there.
	endSeq int64
	// resumed: the run started from a checkpoint, whose counts are in the
	// first stats.
	resumed bool
}

type sample struct {
	at      time.Time
	written int64
	through int64 // -1 when the seq has no numeric part
}

// rateWindow is how far back the docs/s rate looks.
const rateWindow = 10 * time.Second

func newMeter(start time.Time, continuous bool, sinceSeq json.RawMessage) *meter {
	since := int64(-1)
	if len(sinceSeq) > 0 {
		since = seqNumber(sinceSeq)
	}
	return &meter{start: start, continuous: continuous, startSeq: -1, sinceSeq: since, endSeq: -1}
}

// setEnd records the source's update_seq at the start of the run.
func (m *meter) setEnd(updateSeq json.RawMessage) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.endSeq = seqNumber(updateSeq)
}

// seqNumber is the numeric part of a sequence: the number itself, or the
// "N" of CouchDB's opaque "N-g1AAAA…" strings (the sum of the shards' seqs,
// good enough to measure progress); -1 when there is none.
func seqNumber(raw json.RawMessage) int64 {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return -1
	}
	switch t := v.(type) {
	case float64:
		return int64(t)
	case string:
		if i := strings.IndexByte(t, '-'); i >= 0 {
			t = t[:i]
		}
		if n, err := strconv.ParseInt(t, 10, 64); err == nil {
			return n
		}
	}
	return -1
}

func (m *meter) update(now time.Time, s replicate.Stats) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stats = s
	through := seqNumber(s.ThroughSeq)
	if m.startSeq < 0 {
		// The run started at its checkpoint, else at since_seq, else at 0.
		m.startSeq = max(0, m.sinceSeq)
		if cp := seqNumber(s.CheckpointedSourceSeq); cp >= 0 {
			m.startSeq = cp
			m.resumed = true
		}
	}
	m.samples = append(m.samples, sample{at: now, written: s.DocsWritten, through: through})
	for len(m.samples) > 2 && now.Sub(m.samples[1].at) >= rateWindow {
		m.samples = m.samples[1:]
	}
}

// view is what a display shows at one instant.
type view struct {
	Stats   replicate.Stats
	Elapsed time.Duration
	// DocsPerSec is docs_written per second over the last rateWindow.
	DocsPerSec float64
	// Fraction is the share of the source's sequence range processed (0..1),
	// and ETA the time left; both only known for a one-shot replication whose
	// sequences are numbers or CouchDB's "N-…" strings and whose end is known
	// (the source's update_seq at the start, or changes_pending).
	Fraction float64
	ETA      time.Duration
	Known    bool
	// Pending is the changes left: the seq estimate when Known (the engine
	// refreshes changes_pending only every few seconds), else changes_pending.
	Pending *int64
}

func (m *meter) view(now time.Time) view {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := view{Stats: m.stats, Elapsed: now.Sub(m.start), Pending: m.stats.ChangesPending}
	if len(m.samples) == 0 {
		return v
	}
	first, last := m.samples[0], m.samples[len(m.samples)-1]
	dt := last.at.Sub(first.at).Seconds()
	switch {
	case dt > 0:
		v.DocsPerSec = float64(last.written-first.written) / dt
	case !m.resumed && last.at.After(m.start):
		// One sample so far: the rate since the start, not 0 while
		// thousands are written in the first second.
		v.DocsPerSec = float64(last.written) / last.at.Sub(m.start).Seconds()
	}
	if m.continuous {
		return v
	}
	// Work is measured in sequence numbers: from where the run started to the
	// source's update_seq when it started. Only when that is unknown, or
	// already passed (docs written since), is the end estimated from the seq
	// of the newest written batch plus changes_pending, which the engine
	// refreshes only every few seconds.
	if m.startSeq < 0 || last.through < 0 {
		return v
	}
	end := m.endSeq
	if end < 0 || last.through > end {
		end = -1
		if source := seqNumber(m.stats.SourceSeq); source >= 0 && m.stats.ChangesPending != nil {
			end = max(last.through, source+*m.stats.ChangesPending)
		}
	}
	if end < 0 {
		return v
	}
	left := max(0, end-last.through)
	v.Pending = &left
	if total := end - m.startSeq; total > 0 {
		v.Fraction = min(1, float64(last.through-m.startSeq)/float64(total))
		v.Known = true
	} else {
		v.Fraction, v.Known = 1, true
	}
	if first.through >= 0 && dt > 0 && left > 0 {
		if rate := float64(last.through-first.through) / dt; rate > 0 {
			v.ETA = time.Duration(float64(left) / rate * float64(time.Second))
		}
	}
	return v
}

// bar draws a one-line progress bar on a terminal, redrawn in place.
type bar struct {
	w     io.Writer
	m     *meter
	width int
	mu    sync.Mutex
	drawn bool
	last  time.Time
}

// barRedraw is the time between redraws.
const barRedraw = 250 * time.Millisecond

func newBar(w io.Writer, m *meter, width int) *bar {
	if width <= 0 {
		width = 80
	}
	return &bar{w: w, m: m, width: width}
}

func (b *bar) Update(s replicate.Stats) { b.m.update(time.Now(), s) }

func (b *bar) Tick(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if now.Sub(b.last) < barRedraw {
		return
	}
	b.last = now
	line := renderBar(b.m.view(now), b.width)
	fmt.Fprint(b.w, "\r\x1b[K"+line)
	b.drawn = true
}

func (b *bar) Done() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.drawn {
		fmt.Fprint(b.w, "\r\x1b[K")
		b.drawn = false
	}
}

// renderBar formats one line no wider than width:
// `[=====>      ]  42%  42,000 docs  8,120 docs/s  pending 58,000  ETA 7s`.
func renderBar(v view, width int) string {
	var tail strings.Builder
	fmt.Fprintf(&tail, " %s docs  %s docs/s", thousands(v.Stats.DocsWritten), thousands(int64(v.DocsPerSec+0.5)))
	if v.Pending != nil {
		fmt.Fprintf(&tail, "  pending %s", thousands(*v.Pending))
	}
	if v.Stats.DocWriteFailures > 0 {
		fmt.Fprintf(&tail, "  failed %s", thousands(v.Stats.DocWriteFailures))
	}
	if l := v.Stats.LagSec; l != nil && *l > 0 {
		fmt.Fprintf(&tail, "  lag %s", shortDuration(time.Duration(*l)*time.Second))
	}
	if v.Known && v.ETA > 0 {
		fmt.Fprintf(&tail, "  ETA %s", etaString(v.ETA))
	}
	fmt.Fprintf(&tail, "  %s", shortDuration(v.Elapsed))
	var head string
	if v.Known {
		pct := fmt.Sprintf(" %3d%%", int(v.Fraction*100))
		cells := width - len(tail.String()) - len(pct) - 2
		if cells > 40 {
			cells = 40
		}
		if cells >= 10 {
			full := int(v.Fraction * float64(cells))
			head = "[" + strings.Repeat("=", full)
			if full < cells {
				head += ">" + strings.Repeat(" ", cells-full-1)
			}
			head += "]"
		}
		head += pct
	} else {
		spin := `-\|/`
		head = "[" + string(spin[int(v.Elapsed/barRedraw)%len(spin)]) + "]"
	}
	line := head + tail.String()
	if len(line) > width && width > 1 {
		line = line[:width-1]
	}
	return line
}

// logLines writes one structured progress line every interval (for pipes and files).
type logLines struct {
	log      hclog.Logger
	m        *meter
	interval time.Duration
	mu       sync.Mutex
	last     time.Time
	lastSeen int64
}

func newLogLines(log hclog.Logger, m *meter, interval time.Duration, start time.Time) *logLines {
	return &logLines{log: log, m: m, interval: interval, last: start, lastSeen: -1}
}

func (l *logLines) Update(s replicate.Stats) { l.m.update(time.Now(), s) }

func (l *logLines) Tick(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.last) < l.interval {
		return
	}
	l.last = now
	v := l.m.view(now)
	args := []any{
		"docs_read", v.Stats.DocsRead,
		"docs_written", v.Stats.DocsWritten,
		"doc_write_failures", v.Stats.DocWriteFailures,
		"docs_per_second", int64(v.DocsPerSec + 0.5),
	}
	if v.Pending != nil {
		args = append(args, "changes_pending", *v.Pending)
	}
	if v.Stats.LagSec != nil {
		args = append(args, "lag_sec", *v.Stats.LagSec)
	}
	if v.Known && v.ETA > 0 {
		args = append(args, "eta", shortDuration(v.ETA))
	}
	args = append(args, "elapsed", shortDuration(v.Elapsed))
	l.log.Info("progress", args...)
}

func (l *logLines) Done() {}

// quiet shows nothing.
type quiet struct{}

func (quiet) Update(replicate.Stats) {}
func (quiet) Tick(time.Time)         {}
func (quiet) Done()                  {}

// thousands formats n with comma separators: 1234567 → "1,234,567".
func thousands(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// etaString is a time left in whole seconds, rounded up (a display that
// redraws four times a second has no use for "697ms").
func etaString(d time.Duration) string {
	return shortDuration((d + time.Second - 1).Truncate(time.Second))
}

// shortDuration rounds d for humans: 850ms, 12s, 3m05s, 1h02m.
func shortDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}
