package parse

import (
	"reflect"
	"strings"
	"testing"
)

// TestOptionsFromConfigGapKeys: max_document_id_length, request_timeout,
// missing_doc_retry_msec and the TLS keys are read with CouchDB's defaults
// (but verify_ssl_certificates defaults to true); a bad value is reported
// and keeps the default.
func TestOptionsFromConfigGapKeys(t *testing.T) {
	type want struct {
		maxIDLen, requestTimeout, missingRetry, depth, batches, requests int
		verify                                                           bool
		caFile, certFile, keyFile, password                              string
	}
	defaults := want{missingRetry: 2000, depth: 3, batches: 64, verify: true}
	with := func(f func(*want)) want { w := defaults; f(&w); return w }
	tests := []struct {
		name    string
		section map[string]string
		want    want
		errs    []string // reasons the error must hold; none = no error
	}{
		{"absent keys are defaults", map[string]string{}, defaults, nil},
		{"empty values are defaults", map[string]string{"max_document_id_length": "", "request_timeout": "", "missing_doc_retry_msec": "", "ssl_certificate_max_depth": ""}, defaults, nil},
		{"infinity", map[string]string{"max_document_id_length": "infinity", "request_timeout": "infinity"}, defaults, nil},
		{"max_batches_per_host infinity", map[string]string{"max_batches_per_host": "infinity"}, with(func(w *want) { w.batches = 0 }), nil},
		{"max_batches_per_host", map[string]string{"max_batches_per_host": "8"}, with(func(w *want) { w.batches = 8 }), nil},
		{"bad max_batches_per_host", map[string]string{"max_batches_per_host": "0"}, defaults,
			[]string{"[replicator] `max_batches_per_host` must be a positive integer or `infinity`"}},
		{"max_requests_per_host", map[string]string{"max_requests_per_host": "32"}, with(func(w *want) { w.requests = 32 }), nil},
		{"max_requests_per_host infinity is the default", map[string]string{"max_requests_per_host": "infinity"}, defaults, nil},
		{"bad max_requests_per_host", map[string]string{"max_requests_per_host": "0"}, defaults,
			[]string{"[replicator] `max_requests_per_host` must be a positive integer or `infinity`"}},
		{"numbers", map[string]string{"max_document_id_length": "64", "request_timeout": "5000", "missing_doc_retry_msec": "150"},
			with(func(w *want) { w.maxIDLen, w.requestTimeout, w.missingRetry = 64, 5000, 150 }), nil},
		{"TLS keys", map[string]string{"verify_ssl_certificates": "true", "ssl_trusted_certificates_file": "/etc/ca.pem",
			"ssl_certificate_max_depth": "1", "cert_file": "/c.pem", "key_file": "/k.pem", "password": "s3cret"},
			with(func(w *want) {
				w.verify, w.caFile, w.depth, w.certFile, w.keyFile, w.password = true, "/etc/ca.pem", 1, "/c.pem", "/k.pem", "s3cret"
			}), nil},
		{"depth 0 is a depth, not unset", map[string]string{"ssl_certificate_max_depth": "0"},
			with(func(w *want) { w.depth = 0 }), nil},
		{"defaults spelled out", map[string]string{"missing_doc_retry_msec": "2000", "ssl_certificate_max_depth": "3", "max_batches_per_host": "64"}, defaults, nil},
		{"verify false", map[string]string{"verify_ssl_certificates": "false"}, with(func(w *want) { w.verify = false }), nil},
		{"bad max_document_id_length", map[string]string{"max_document_id_length": "0"}, defaults,
			[]string{"[replicator] `max_document_id_length` must be a positive integer or `infinity`"}},
		{"bad request_timeout", map[string]string{"request_timeout": "soon"}, defaults,
			[]string{"[replicator] `request_timeout` must be a positive integer or `infinity`"}},
		{"bad missing_doc_retry_msec", map[string]string{"missing_doc_retry_msec": "0"}, defaults,
			[]string{"[replicator] `missing_doc_retry_msec` must be a positive integer"}},
		{"bad verify_ssl_certificates", map[string]string{"verify_ssl_certificates": "yes"}, defaults,
			[]string{"[replicator] `verify_ssl_certificates` must be a boolean"}},
		{"bad ssl_certificate_max_depth", map[string]string{"ssl_certificate_max_depth": "-1"}, defaults,
			[]string{"[replicator] `ssl_certificate_max_depth` must be a non-negative integer"}},
		{"cert_file without key_file", map[string]string{"cert_file": "/c.pem"}, defaults,
			[]string{"[replicator] `cert_file` and `key_file` must be set together"}},
		{"several bad keys at once", map[string]string{"request_timeout": "-5", "ssl_certificate_max_depth": "x", "max_document_id_length": "10"},
			with(func(w *want) { w.maxIDLen = 10 }),
			[]string{"`request_timeout` must be a positive integer or `infinity`", "`ssl_certificate_max_depth` must be an integer"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := OptionsFromConfig(tc.section)
			got := want{o.MaxDocumentIDLength, o.RequestTimeout, o.MissingDocRetry(), o.CertificateMaxDepth(), o.BatchesPerHost(),
				o.MaxRequestsPerHost, o.VerifySSLCertificates, o.SSLTrustedCertificatesFile, o.CertFile, o.KeyFile, o.Password}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if len(tc.errs) == 0 && err != nil {
				t.Errorf("unexpected error %v", err)
			}
			if len(tc.errs) > 0 && err == nil {
				t.Fatal("no error")
			}
			for _, r := range tc.errs {
				if !strings.Contains(err.Error(), r) {
					t.Errorf("error %q lacks %q", err, r)
				}
			}
		})
	}
}

// TestOptionsFromConfigDefaultsEqual: a config spelling out the defaults
// of the new keys reads as DefaultOptions (docs/replicator_test.go relies on it).
func TestOptionsFromConfigDefaultsEqual(t *testing.T) {
	o, err := OptionsFromConfig(map[string]string{"max_document_id_length": "infinity", "request_timeout": "infinity",
		"missing_doc_retry_msec": "2000", "verify_ssl_certificates": "true", "ssl_certificate_max_depth": "3", "max_batches_per_host": "64",
		"max_requests_per_host": "infinity", "ssl_trusted_certificates_file": "", "cert_file": "", "key_file": "", "password": ""})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(o, DefaultOptions()) {
		t.Errorf("options = %+v, want the defaults", o)
	}
}

// TestOptionsFromConfigKeepsOtherKeys: the new keys leave the older ones alone.
func TestOptionsFromConfigKeepsOtherKeys(t *testing.T) {
	o, err := OptionsFromConfig(map[string]string{"request_timeout": "100", "worker_processes": "2"})
	if err != nil {
		t.Fatal(err)
	}
	if o.WorkerProcesses != 2 || o.WorkerBatchSize != 500 || o.RequestTimeout != 100 {
		t.Errorf("options = %+v", o)
	}
}
