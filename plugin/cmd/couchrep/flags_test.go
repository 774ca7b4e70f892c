package main

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/couchepi/couchepi/parse"
)

func TestParseArgs(t *testing.T) {
	dir := t.TempDir()
	repFile := filepath.Join(dir, "rep.json")
	if err := os.WriteFile(repFile, []byte(`{"source":"http://h:5984/a","target":{"url":"http://h:5984/b"},"continuous":true,"worker_processes":2}`), 0o600); err != nil {
		t.Fatal(err)
	}
	iniFile := writeFile(t, dir, "local.ini", "[couchdb]\nuuid = x\n\n[replicator]\n; CouchDB-style comment\nworker_processes = 2\nrequest_timeout = 5000\nverify_ssl_certificates = false\nmax_document_id_length = 64\n")
	badIni := writeFile(t, dir, "bad.ini", "[replicator]\nworker_batch_size = lots\n")
	const src, tgt = "http://u:p@h:5984/a", "http://h:5984/b"
	tests := []struct {
		name  string
		args  []string
		stdin string
		check func(t *testing.T, c *cli)
		err   string // substring of the usage error; "" = success
	}{
		{name: "defaults", args: []string{src, tgt}, check: func(t *testing.T, c *cli) {
			r := c.Rep
			if r.Source.URL != "http://h:5984/a/" || r.Target.URL != tgt+"/" {
				t.Errorf("urls %q %q", r.Source.URL, r.Target.URL)
			}
			if r.Source.Auth == nil || r.Source.Auth.Username != "u" || r.Source.Auth.Password != "p" {
				t.Errorf("source auth %+v", r.Source.Auth)
			}
			if r.Continuous || r.CreateTarget || !r.UseCheckpoints || !r.UseBulkGet || r.WorkerProcesses != 4 || r.WorkerBatchSize != 500 {
				t.Errorf("defaults %+v", r)
			}
			if c.Progress != "auto" || c.LogInterval != 5*time.Second {
				t.Errorf("display %q %v", c.Progress, c.LogInterval)
			}
		}},
		{name: "every option flag", args: []string{"--continuous", "--create-target", "--winning-revs-only", "--no-checkpoints", "--no-bulk-get",
			"--worker-processes", "2", "--worker-batch-size", "100", "--http-connections", "5", "--connection-timeout", "9000",
			"--retries-per-request", "3", "--checkpoint-interval", "5000", "--checkpoint", "target", "--since-seq", "42", src, tgt}, check: func(t *testing.T, c *cli) {
			r := c.Rep
			if r.Checkpoint != "target" {
				t.Errorf("checkpoint %q", r.Checkpoint)
			}
			if !r.Continuous || !r.CreateTarget || !r.WinningRevsOnly || r.UseCheckpoints || r.UseBulkGet {
				t.Errorf("bools %+v", r)
			}
			if r.WorkerProcesses != 2 || r.WorkerBatchSize != 100 || r.HTTPConnections != 5 || r.ConnectionTimeout != 9000 ||
				r.RetriesPerRequest != 3 || r.CheckpointInterval != 5000 {
				t.Errorf("ints %+v", r)
			}
			if string(r.SinceSeq) != "42" {
				t.Errorf("since_seq %s", r.SinceSeq)
			}
		}},
		{name: "flags after and between positionals", args: []string{src, "--continuous", tgt, "--doc-ids", "b,a,,a"}, check: func(t *testing.T, c *cli) {
			if !c.Rep.Continuous || strings.Join(c.Rep.DocIDs, ",") != "a,b" {
				t.Errorf("continuous %v doc_ids %q", c.Rep.Continuous, c.Rep.DocIDs)
			}
		}},
		{name: "string since_seq", args: []string{"--since-seq", "12-g1AAAA", src, tgt}, check: func(t *testing.T, c *cli) {
			if string(c.Rep.SinceSeq) != `"12-g1AAAA"` {
				t.Errorf("since_seq %s", c.Rep.SinceSeq)
			}
		}},
		{name: "filter with query params", args: []string{"--filter", "app/by_type", "--query-params", `{"type":"a","n":"1"}`, src, tgt}, check: func(t *testing.T, c *cli) {
			if c.Rep.Filter != "app/by_type" || string(c.Rep.QueryParams) != `{"type":"a","n":"1"}` {
				t.Errorf("filter %q %s", c.Rep.Filter, c.Rep.QueryParams)
			}
		}},
		{name: "selector", args: []string{"--selector", `{"type":"a"}`, src, tgt}, check: func(t *testing.T, c *cli) {
			if len(c.Rep.Selector) == 0 {
				t.Errorf("selector missing")
			}
		}},
		{name: "json file with flag override", args: []string{"--json", repFile, "--worker-processes", "7"}, check: func(t *testing.T, c *cli) {
			if !c.Rep.Continuous || c.Rep.WorkerProcesses != 7 || c.Rep.Target.URL != "http://h:5984/b/" {
				t.Errorf("rep %+v", c.Rep)
			}
		}},
		{name: "json from stdin", args: []string{"--json", "-"}, stdin: `{"source":"http://h/a","target":"http://h/b","create_target":true}`, check: func(t *testing.T, c *cli) {
			if !c.Rep.CreateTarget {
				t.Errorf("create_target not set")
			}
		}},
		{name: "local url for bare names", args: []string{"--local-url", "http://h:5984/", "a", "b"}, check: func(t *testing.T, c *cli) {
			if c.Rep.Source.URL != "http://h:5984/a/" || c.Rep.Target.URL != "http://h:5984/b/" {
				t.Errorf("urls %q %q", c.Rep.Source.URL, c.Rep.Target.URL)
			}
		}},
		{name: "help", args: []string{"--help"}, check: func(t *testing.T, c *cli) {
			if !c.Help {
				t.Error("help not set")
			}
		}},
		{name: "no arguments", args: nil, err: "need SOURCE and TARGET"},
		{name: "one argument", args: []string{src}, err: "need SOURCE and TARGET"},
		{name: "three arguments", args: []string{src, tgt, "x"}, err: `unexpected argument "x"`},
		{name: "json and positionals", args: []string{"--json", repFile, src, tgt}, err: "not both"},
		{name: "unknown flag", args: []string{"--bogus", src, tgt}, err: "flag provided but not defined: -bogus"},
		{name: "bare db name", args: []string{"a", tgt}, err: "Local endpoints are not supported: `source` must be an http:// or https:// URL"},
		{name: "bad url scheme", args: []string{"ftp://h/a", tgt}, err: "`source`"},
		{name: "exclusive filters", args: []string{"--doc-ids", "a", "--selector", `{"a":1}`, src, tgt}, err: "`doc_ids`,`filter`,`selector` are mutually  exclusive"},
		{name: "non-integer workers", args: []string{"--worker-processes", "many", src, tgt}, err: "`worker_processes` must be an integer"},
		{name: "zero workers", args: []string{"--worker-processes", "0", src, tgt}, err: "worker_processes"},
		{name: "selector not JSON", args: []string{"--selector", "{a", src, tgt}, err: "not valid JSON"},
		{name: "bad progress", args: []string{"--progress", "fancy", src, tgt}, err: "--progress"},
		{name: "cancel in json", args: []string{"--json", "-"}, stdin: `{"replication_id":"abc","cancel":true}`, err: "Ctrl-C"},
		{name: "json not an object", args: []string{"--json", "-"}, stdin: `[1]`, err: "not a JSON object"},
		{name: "--config sets defaults and replicator-wide keys", args: []string{"--config", iniFile, src, tgt}, check: func(t *testing.T, c *cli) {
			if c.Rep.WorkerProcesses != 2 || c.Rep.WorkerBatchSize != 500 {
				t.Errorf("worker_processes %d, worker_batch_size %d; want 2 from the config, 500", c.Rep.WorkerProcesses, c.Rep.WorkerBatchSize)
			}
			if o := c.Options; o.RequestTimeout != 5000 || o.VerifySSLCertificates || o.MaxDocumentIDLength != 64 {
				t.Errorf("options %+v", o)
			}
		}},
		{name: "flags override --config", args: []string{"--config", iniFile, "--worker-processes", "3", src, tgt}, check: func(t *testing.T, c *cli) {
			if c.Rep.WorkerProcesses != 3 {
				t.Errorf("worker_processes %d, want the flag's 3", c.Rep.WorkerProcesses)
			}
		}},
		{name: "no --config: CouchDB defaults, peers verified", args: []string{src, tgt}, check: func(t *testing.T, c *cli) {
			if o := c.Options; !o.VerifySSLCertificates || o.RequestTimeout != 0 || o.WorkerProcesses != 4 {
				t.Errorf("options %+v", o)
			}
		}},
		{name: "--config with a bad value", args: []string{"--config", badIni, src, tgt}, err: "`worker_batch_size` must be an integer"},
		{name: "--config missing", args: []string{"--config", filepath.Join(dir, "nope.ini"), src, tgt}, err: "--config"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseArgs(tc.args, strings.NewReader(tc.stdin))
			if tc.err != "" {
				var ue *usageError
				if !errors.As(err, &ue) {
					t.Fatalf("want usage error containing %q, got %v", tc.err, err)
				}
				if !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %q does not contain %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			tc.check(t, c)
		})
	}
}

// writeFile writes text to dir/name and returns the path.
func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestDocsAndHelpListEveryFlag keeps --help and docs/couchrep.md true: every
// flag couchrep defines is in both, and neither names a flag that does not exist.
func TestDocsAndHelpListEveryFlag(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot(), "docs", "couchrep.md"))
	if err != nil {
		t.Fatal(err)
	}
	var c cli
	var s1, s2, s3 string
	fs := flagSet(&c, &optionFlags{values: map[string]json.RawMessage{}}, &s1, &s2, &s3)
	defined := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) {
		defined[f.Name] = true
		if f.Name == "h" || f.Name == "help" {
			return
		}
		if !strings.Contains(usageText, "--"+f.Name+" ") && !strings.Contains(usageText, "--"+f.Name+"\n") {
			t.Errorf("--help does not mention --%s", f.Name)
		}
		if !strings.Contains(string(doc), "`--"+f.Name) {
			t.Errorf("docs/couchrep.md does not mention --%s", f.Name)
		}
	})
	mentioned := regexp.MustCompile("--([a-z][a-z-]+)").FindAllStringSubmatch(usageText+string(doc), -1)
	for _, m := range mentioned {
		if !defined[m[1]] {
			t.Errorf("--%s is documented but not defined", m[1])
		}
	}
}

// TestUnlimitedHosts (issue 38 item 2): couchrep reaches what whoever runs
// it can reach: neither a config's host policy nor the default denials
// of link-local and unspecified addresses limit it.
func TestUnlimitedHosts(t *testing.T) {
	c, err := parseArgs([]string{"http://169.254.169.254/a", "http://0.0.0.0:5984/b"}, strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Options.Hosts.Unlimited || c.Options.LimitsHosts(c.Rep) {
		t.Errorf("couchrep's host policy: %+v", c.Options.Hosts)
	}
	if err := parse.CheckHosts(c.Rep, c.Options); err != nil {
		t.Errorf("couchrep refused: %v", err)
	}
}
