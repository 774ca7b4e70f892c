// Command couchrep runs one CouchDB replication from the terminal with
// couchepi's replicator engine (the same code the replicator plugin runs).
//
//	couchrep [flags] SOURCE TARGET
//	couchrep [flags] --json rep.json
//
// SOURCE and TARGET are database URLs (http://user:pass@host:5984/db). The
// replication is parsed exactly like a POST /_replicate body, so invalid
// options are refused with CouchDB's reason text. See usageText for the flags
// and the exit codes.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/couchclient"
	"github.com/couchepi/couchepi/plugin/replicate"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/term"
)

// Exit codes scripts can rely on.
const (
	exitDone        = 0   // the replication completed (one-shot) or was never needed
	exitFailed      = 1   // the replication failed (missing database, unauthorized, network…)
	exitUsage       = 2   // bad command line or an invalid replication (CouchDB's reason is printed)
	exitInterrupted = 130 // stopped by SIGINT/SIGTERM after a final checkpoint
)

const usageText = `couchrep runs one CouchDB replication with couchepi's replicator engine.

Usage:
  couchrep [flags] SOURCE TARGET
  couchrep [flags] --json rep.json      (a POST /_replicate body; "-" reads stdin)

SOURCE and TARGET are database URLs, e.g. http://admin:secret@127.0.0.1:5984/db.
Credentials are never printed. Options are checked exactly as POST /_replicate
checks them, and refused with CouchDB's reason text.

Replication options (same meaning as the _replicate/_replicator fields):
  --continuous                 keep replicating new changes until interrupted
  --create-target              create the target database if it does not exist
  --doc-ids a,b,c              replicate only these document ids
  --selector JSON              replicate only documents matching a Mango selector
  --filter ddoc/name           filter function (or _doc_ids, _selector, _design, _view)
  --query-params JSON          parameters for the filter function
  --since-seq SEQ              start sequence when no checkpoint applies
  --worker-processes N         parallel workers (default 4)
  --worker-batch-size N        changes per batch (default 500)
  --http-connections N         connections per endpoint (default 20)
  --connection-timeout MS      request inactivity timeout (default 30000)
  --retries-per-request N      retries of a failed request (default 5)
  --checkpoint-interval MS     time between checkpoints (default 30000)
  --checkpoint target          write checkpoints on the target alone (a source you may only read)
  --no-checkpoints             neither read nor write checkpoints
  --no-bulk-get                fetch documents one by one instead of with _bulk_get
  --winning-revs-only          replicate only winning revisions
  --doc-write-failure count|fail
                               what a document the target refuses does: counted
                               and passed over (count, the default) or the end
                               of the replication (fail)
  --json FILE                  read the replication from a _replicate body; flags override its fields
  --config FILE                CouchDB ini whose [replicator] section applies (defaults, TLS, request_timeout)
  --local-url URL              base URL that bare database names are relative to

Display and identity:
  --progress auto|bar|log|none progress display (default auto: a bar on a terminal,
                               log lines every --log-interval otherwise)
  --log-interval DURATION      time between progress log lines (default 5s)
  --log-level LEVEL            replicator log lines on stderr (default warn)
  --server-uuid UUID           uuid in the replication id; default: one kept in
                               $COUCHREP_HOME or <user config dir>/couchrep, so
                               repeated runs resume from their checkpoints

Exit codes:
  0    the replication completed
  1    the replication failed (e.g. "db_not_found: could not open http://host/db/")
  2    usage error or invalid replication options
  130  interrupted (Ctrl-C/SIGTERM); the final checkpoint was written, a rerun resumes
`

func main() {
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, sig, term.IsTerminal(int(os.Stdout.Fd())), terminalWidth))
}

func terminalWidth() int {
	w, _, err := term.GetSize(int(os.Stdout.Fd()))
	if err != nil {
		return 80
	}
	return w
}

// run is couchrep with its environment passed in; it returns the exit code.
// A first signal on sig stops the replication gracefully (final checkpoint),
// a second one gives up at once.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer, sig <-chan os.Signal, tty bool, width func() int) int {
	c, err := parseArgs(args, stdin)
	if err != nil {
		fmt.Fprintf(stderr, "couchrep: %v\nRun 'couchrep --help' for usage.\n", err)
		return exitUsage
	}
	if c.Help {
		fmt.Fprint(stdout, usageText)
		return exitDone
	}
	level := hclog.LevelFromString(c.LogLevel)
	if level == hclog.NoLevel {
		fmt.Fprintf(stderr, "couchrep: unknown --log-level %q\n", c.LogLevel)
		return exitUsage
	}
	engineLog := hclog.New(&hclog.LoggerOptions{Name: "couchrep", Output: stderr, Level: level})
	if c.ServerUUID == "" {
		dir, err := configDir()
		if err == nil {
			c.ServerUUID, err = serverUUID(dir)
		}
		if err != nil {
			fmt.Fprintf(stderr, "couchrep: %v\n", err)
			return exitFailed
		}
	} else if !validUUID(c.ServerUUID) {
		fmt.Fprintf(stderr, "couchrep: --server-uuid must be 32 lower-case hex digits\n")
		return exitUsage
	}

	rep := c.Rep
	mode := c.Progress
	if mode == "auto" {
		mode = "log"
		if tty {
			mode = "bar"
		}
	}
	start := time.Now()
	m := newMeter(start, rep.Continuous, rep.SinceSeq)
	outLog := hclog.New(&hclog.LoggerOptions{Name: "couchrep", Output: stdout, Level: hclog.Info})
	var p progress
	switch mode {
	case "bar":
		p = newBar(stdout, m, width())
	case "log":
		p = newLogLines(outLog, m, c.LogInterval, start)
	default:
		p = quiet{}
	}
	kind := "one-shot"
	if rep.Continuous {
		kind = "continuous"
	}
	if mode == "bar" {
		fmt.Fprintf(stdout, "%s replication %s -> %s\n", kind, rep.Source.RedactedURL(), rep.Target.RedactedURL())
	} else if mode == "log" {
		outLog.Info("starting", "source", rep.Source.RedactedURL(), "target", rep.Target.RedactedURL(), "continuous", rep.Continuous)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	interrupted := make(chan struct{})
	go func() {
		select {
		case <-sig:
		case <-ctx.Done():
			return
		}
		close(interrupted)
		cancel()
		select {
		case <-sig:
			p.Done()
			fmt.Fprintln(stderr, "couchrep: interrupted again, quitting without a final checkpoint")
			os.Exit(exitInterrupted)
		case <-ctx.Done():
		}
	}()

	pool := couchclient.NewPool(couchclient.PoolOptions{Logger: engineLog})
	defer pool.Close()
	if err := pool.Configure(c.Options); err != nil {
		fmt.Fprintf(stderr, "couchrep: --config: %v\n", err)
		return exitUsage
	}
	if !rep.Continuous && mode != "none" {
		go func() {
			if seq, ok := sourceUpdateSeq(ctx, pool, rep); ok {
				m.setEnd(seq)
			}
		}()
	}
	type outcome struct {
		res *replicate.Result
		err error
	}
	done := make(chan outcome, 1)
	var carriedMu sync.Mutex
	var carried replicate.Stats // totals of earlier runs this one resumes
	go func() {
		res, err := replicate.Run(ctx, rep, replicate.Options{
			Logger:     engineLog,
			Pool:       pool,
			ServerUUID: c.ServerUUID,
			OnStats:    p.Update,
			OnStart: func(s replicate.Stats) {
				carriedMu.Lock()
				carried = s
				carriedMu.Unlock()
			},
			// Replicator-wide keys of --config, as the job server passes them.
			MaxDocumentIDLength: c.Options.MaxDocumentIDLength,
			MissingDocRetry:     time.Duration(c.Options.MissingDocRetry()) * time.Millisecond,
			// A replication that stops moving ends with the reason rather
			// than leaving the command hanging.
			StallTimeout: replicate.DefaultStallTimeout,
		})
		done <- outcome{res, err}
	}()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var out outcome
wait:
	for {
		select {
		case out = <-done:
			break wait
		case now := <-tick.C:
			p.Tick(now)
		}
	}
	p.Done()
	elapsed := time.Since(start)

	select {
	case <-interrupted:
		if out.err == nil || errors.Is(out.err, replicate.ErrStopped) {
			carriedMu.Lock()
			summary(stdout, mode, outLog, "stopped", m.view(time.Now()).Stats, carried, elapsed)
			carriedMu.Unlock()
			return exitInterrupted
		}
	default:
	}
	if out.err != nil {
		fmt.Fprintf(stderr, "couchrep: %s\n", redactText(out.err.Error()))
		return exitFailed
	}
	carriedMu.Lock()
	summary(stdout, mode, outLog, "completed", out.res.Stats, carried, elapsed)
	carriedMu.Unlock()
	return exitDone
}

// sourceUpdateSeq reads the source's update_seq (a one-shot replication
// ends there), for the progress estimate only: failures are left to Run.
func sourceUpdateSeq(ctx context.Context, pool *couchclient.Pool, rep *parse.Rep) (json.RawMessage, bool) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := pool.Endpoint(rep.Source, rep).Do(ctx, &couchclient.Request{Method: http.MethodGet, NoRetry: true})
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	var info struct {
		UpdateSeq json.RawMessage `json:"update_seq"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&info) != nil {
		return nil, false
	}
	return info.UpdateSeq, len(info.UpdateSeq) > 0
}

// summary prints the final state: a sentence on a terminal, a log line
// otherwise. s holds totals including what earlier runs did (a resumed run
// starts from its checkpoint's counts, carried); the counts and rate shown
// first are this run's own, and the totals follow when they differ.
func summary(w io.Writer, mode string, log hclog.Logger, state string, s, carried replicate.Stats, elapsed time.Duration) {
	run := replicate.Stats{
		DocsRead:              s.DocsRead - carried.DocsRead,
		DocsWritten:           s.DocsWritten - carried.DocsWritten,
		DocWriteFailures:      s.DocWriteFailures - carried.DocWriteFailures,
		RevisionsChecked:      s.RevisionsChecked - carried.RevisionsChecked,
		MissingRevisionsFound: s.MissingRevisionsFound - carried.MissingRevisionsFound,
	}
	resumed := carried.DocsRead != 0 || carried.DocsWritten != 0 || carried.DocWriteFailures != 0 || carried.RevisionsChecked != 0
	rate := 0.0
	if elapsed > 0 {
		rate = float64(run.DocsWritten) / elapsed.Seconds()
	}
	switch mode {
	case "log":
		args := []any{"docs_read", run.DocsRead, "docs_written", run.DocsWritten, "doc_write_failures", run.DocWriteFailures,
			"revisions_checked", run.RevisionsChecked, "missing_revisions_found", run.MissingRevisionsFound,
			"docs_per_second", int64(rate + 0.5), "elapsed", shortDuration(elapsed)}
		if resumed {
			args = append(args, "total_docs_read", s.DocsRead, "total_docs_written", s.DocsWritten, "total_doc_write_failures", s.DocWriteFailures)
		}
		if run.DocWriteFailures > 0 {
			args = append(args, "doc_write_failures_by_reason", byReasonText(s.DocWriteFailuresByReason))
		}
		log.Info(state, args...)
	case "bar":
		fmt.Fprintf(w, "%s: %s docs read, %s written, %s failed in %s (%s docs/s)", state,
			thousands(run.DocsRead), thousands(run.DocsWritten), thousands(run.DocWriteFailures),
			shortDuration(elapsed), thousands(int64(rate+0.5)))
		if resumed {
			fmt.Fprintf(w, "; with earlier runs: %s read, %s written, %s failed",
				thousands(s.DocsRead), thousands(s.DocsWritten), thousands(s.DocWriteFailures))
		}
		fmt.Fprintln(w)
		if run.DocWriteFailures > 0 {
			refused(w, s)
		}
	}
}

// refused lists, on a terminal, the documents the target refused (the
// last replicate.MaxFailedDocs, newest first) and the counts by kind.
func refused(w io.Writer, s replicate.Stats) {
	if len(s.FailedDocs) == 0 {
		return
	}
	fmt.Fprintf(w, "refused documents (%s), newest first:\n", byReasonText(s.DocWriteFailuresByReason))
	for _, f := range s.FailedDocs {
		fmt.Fprintf(w, "  %s", f.ID)
		if f.Rev != "" {
			fmt.Fprintf(w, " %s", f.Rev)
		}
		fmt.Fprint(w, ": ")
		if f.Status != 0 {
			fmt.Fprintf(w, "%d ", f.Status)
		}
		fmt.Fprintf(w, "%s: %s\n", f.Error, f.Reason)
	}
}

// byReasonText is counts by kind as "forbidden 2, too_large 1", in
// replicate.WriteFailureReasons' order.
func byReasonText(counts map[string]int64) string {
	var parts []string
	for _, r := range replicate.WriteFailureReasons() {
		if n := counts[r]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %s", r, thousands(n)))
		}
	}
	return strings.Join(parts, ", ")
}

// redactText hides passwords in any URL inside an error text (the engine
// already redacts; this guards errors from other layers).
func redactText(s string) string {
	fields := strings.Fields(s)
	for i, f := range fields {
		if at := strings.Index(f, "@"); at > 0 && strings.Contains(f[:at], "://") {
			scheme := strings.Index(f, "://") + 3
			if colon := strings.Index(f[scheme:at], ":"); colon >= 0 {
				fields[i] = f[:scheme+colon+1] + "*****" + f[at:]
			}
		}
	}
	return strings.Join(fields, " ")
}
