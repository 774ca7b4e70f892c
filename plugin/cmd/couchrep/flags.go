package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/couchepi/couchepi/internal/jsonobj"
	"github.com/couchepi/couchepi/parse"
)

// usageError is a problem with the command line or the replication body; it exits with exitUsage.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{msg: fmt.Sprintf(format, args...)} }

// cli is a parsed command line: the replication and how to run and show it.
type cli struct {
	// Rep is the replication, parsed by parse.ReplicateRequest like POST /_replicate.
	Rep *parse.Rep
	// ServerUUID is the uuid that goes into the replication id ("" = the persisted one).
	ServerUUID string
	// Progress is "auto" (bar on a terminal, log lines otherwise), "bar", "log" or "none".
	Progress string
	// LogInterval is the time between progress log lines.
	LogInterval time.Duration
	// LogLevel is the level of the engine's own log lines on stderr.
	LogLevel string
	// Help is set when --help was asked for.
	Help bool
	// Options are the `[replicator]` options of --config (DefaultOptions
	// without it): defaults of the replication's fields and the
	// replicator-wide keys (TLS, request_timeout, max_document_id_length, …).
	// They hold the config's `password`: never print them.
	Options parse.Options
}

// optionFlags are the replication options settable by flag, in the order they
// are written into the `_replicate` body. Each value is the raw JSON value.
type optionFlags struct {
	order  []string
	values map[string]json.RawMessage
}

func (o *optionFlags) set(key string, raw json.RawMessage) {
	if _, ok := o.values[key]; !ok {
		o.order = append(o.order, key)
	}
	o.values[key] = raw
}

// boolFlag records `key: true` (or false for the --no-* flags) when given.
type boolFlag struct {
	o     *optionFlags
	key   string
	value bool
}

func (b *boolFlag) IsBoolFlag() bool { return true }
func (b *boolFlag) String() string   { return "" }
func (b *boolFlag) Set(s string) error {
	v, err := parseBool(s)
	if err != nil {
		return err
	}
	if !b.value {
		v = !v
	}
	b.o.set(b.key, json.RawMessage(fmt.Sprint(v)))
	return nil
}

func parseBool(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "1", "t", "true", "yes", "on":
		return true, nil
	case "0", "f", "false", "no", "off":
		return false, nil
	}
	return false, fmt.Errorf("not a boolean: %q", s)
}

// rawFlag records a JSON value; kind says how the command-line text becomes JSON.
type rawFlag struct {
	o    *optionFlags
	key  string
	kind rawKind
}

type rawKind int

const (
	rawJSON     rawKind = iota // the text must be JSON (selector, query_params)
	rawString                  // the text is a string (filter)
	rawInt                     // the text is JSON, normally an integer; CouchDB's checks apply
	rawSeq                     // JSON if it parses (42, "3-g1…"), else a string
	rawStrSlice                // comma-separated strings (doc_ids)
)

func (r *rawFlag) String() string { return "" }
func (r *rawFlag) Set(s string) error {
	var raw json.RawMessage
	switch r.kind {
	case rawJSON:
		if !json.Valid([]byte(s)) {
			return fmt.Errorf("not valid JSON: %s", s)
		}
		raw = json.RawMessage(s)
	case rawString:
		raw = mustJSON(s)
	case rawSeq, rawInt:
		if json.Valid([]byte(s)) {
			raw = json.RawMessage(s)
		} else {
			raw = mustJSON(s)
		}
	case rawStrSlice:
		ids := []string{}
		for _, id := range strings.Split(s, ",") {
			if id != "" {
				ids = append(ids, id)
			}
		}
		raw = mustJSON(ids)
	}
	r.o.set(r.key, raw)
	return nil
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// flagSet declares every flag of couchrep on a fresh FlagSet.
func flagSet(c *cli, o *optionFlags, jsonFile, localURL, configFile *string) *flag.FlagSet {
	fs := flag.NewFlagSet("couchrep", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	bools := []struct {
		name, key string
		value     bool
		help      string
	}{
		{"continuous", "continuous", true, "keep replicating new changes until interrupted"},
		{"create-target", "create_target", true, "create the target database if it does not exist"},
		{"winning-revs-only", "winning_revs_only", true, "replicate only the winning revision of each document"},
		{"no-checkpoints", "use_checkpoints", false, "do not read or write checkpoints (always start from since_seq or 0)"},
		{"no-bulk-get", "use_bulk_get", false, "fetch documents one by one instead of with _bulk_get"},
	}
	for _, b := range bools {
		fs.Var(&boolFlag{o: o, key: b.key, value: b.value}, b.name, b.help)
	}
	raws := []struct {
		name, key string
		kind      rawKind
		help      string
	}{
		{"doc-ids", "doc_ids", rawStrSlice, "replicate only these document ids (comma-separated)"},
		{"selector", "selector", rawJSON, "replicate only documents matching this Mango selector (JSON)"},
		{"filter", "filter", rawString, "filter function: ddoc/name, or _doc_ids, _selector, _design, _view"},
		{"query-params", "query_params", rawJSON, "parameters for the filter function (JSON object)"},
		{"since-seq", "since_seq", rawSeq, "start from this source sequence (when no checkpoint applies)"},
		{"worker-processes", "worker_processes", rawInt, "number of parallel workers (default 4)"},
		{"worker-batch-size", "worker_batch_size", rawInt, "changes per worker batch (default 500)"},
		{"http-connections", "http_connections", rawInt, "connections per endpoint (default 20)"},
		{"connection-timeout", "connection_timeout", rawInt, "request inactivity timeout in ms (default 30000)"},
		{"retries-per-request", "retries_per_request", rawInt, "retries of a failed request (default 5)"},
		{"checkpoint-interval", "checkpoint_interval", rawInt, "ms between checkpoints (default 30000)"},
		{"doc-write-failure", "doc_write_failure", rawString, "what a document the target refuses does: count (default) or fail"},
		{"checkpoint", "checkpoint", rawString, "where checkpoints are written: both (default) or target, for a source you may only read"},
	}
	for _, r := range raws {
		fs.Var(&rawFlag{o: o, key: r.key, kind: r.kind}, r.name, r.help)
	}
	fs.StringVar(jsonFile, "json", "", "read a POST /_replicate body from this file (\"-\" = stdin); flags override its fields")
	fs.StringVar(configFile, "config", "", "CouchDB ini file whose [replicator] section applies (defaults, TLS keys, request_timeout, …)")
	fs.StringVar(localURL, "local-url", "", "server base URL bare database names are relative to (e.g. http://127.0.0.1:5984/)")
	fs.StringVar(&c.ServerUUID, "server-uuid", "", "uuid used in the replication id (default: one kept in the user config dir)")
	fs.StringVar(&c.Progress, "progress", "auto", "progress display: auto, bar, log or none")
	fs.DurationVar(&c.LogInterval, "log-interval", 5*time.Second, "time between progress log lines when not on a terminal")
	fs.StringVar(&c.LogLevel, "log-level", "warn", "level of the replicator's own log lines on stderr: trace, debug, info, warn, error")
	fs.BoolVar(&c.Help, "help", false, "show this help")
	fs.BoolVar(&c.Help, "h", false, "show this help")
	return fs
}

// parseArgs parses the command line (flags may come before, between or after
// SOURCE and TARGET) into a cli. stdin is read for `--json -`. Errors are *usageError.
func parseArgs(args []string, stdin io.Reader) (*cli, error) {
	c := &cli{}
	o := &optionFlags{values: map[string]json.RawMessage{}}
	var jsonFile, localURL, configFile string
	fs := flagSet(c, o, &jsonFile, &localURL, &configFile)
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				c.Help = true
				return c, nil
			}
			return nil, usagef("%v", err)
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
	if c.Help {
		return c, nil
	}
	switch c.Progress {
	case "auto", "bar", "log", "none":
	default:
		return nil, usagef("--progress must be auto, bar, log or none, not %q", c.Progress)
	}
	if c.LogInterval <= 0 {
		return nil, usagef("--log-interval must be positive")
	}

	var base jsonobj.Object
	switch {
	case jsonFile != "" && len(positional) > 0:
		return nil, usagef("give either --json FILE or SOURCE TARGET, not both")
	case jsonFile != "":
		data, err := readInput(jsonFile, stdin)
		if err != nil {
			return nil, usagef("--json: %v", err)
		}
		if base, err = jsonobj.Parse(data); err != nil {
			return nil, usagef("--json %s: %v", jsonFile, err)
		}
	case len(positional) == 2:
		base = jsonobj.Object{{Key: "source", Value: mustJSON(positional[0])}, {Key: "target", Value: mustJSON(positional[1])}}
	case len(positional) < 2:
		return nil, usagef("need SOURCE and TARGET (or --json FILE)")
	default:
		return nil, usagef("unexpected argument %q after SOURCE and TARGET", positional[2])
	}
	for _, k := range o.order {
		base = base.Set(k, o.values[k])
	}
	body := base.Bytes()

	popts := parse.DefaultOptions()
	if configFile != "" {
		var err error
		if popts, err = replicatorConfig(configFile); err != nil {
			return nil, usagef("--config %s: %v", configFile, err)
		}
	}
	// allowed_hosts and denied_networks, and the default denials, limit a
	// server's users; couchrep reaches what whoever runs it can reach.
	popts.Hosts = parse.HostPolicy{Unlimited: true}
	c.Options = popts
	popts.LocalURL = localURL
	rep, err := parse.ReplicateRequest(body, parse.UserCtx{}, popts)
	if err != nil {
		return nil, usagef("%v", err)
	}
	if rep.Cancel {
		return nil, usagef("cancel is for a running server's replications; stop couchrep with Ctrl-C")
	}
	c.Rep = rep
	return c, nil
}

func readInput(name string, stdin io.Reader) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(stdin)
	}
	return os.ReadFile(name)
}
