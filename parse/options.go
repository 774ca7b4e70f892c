package parse

import (
	"errors"
	"strconv"
)

// OptionsFromConfig reads the `[replicator]` config section into Options,
// starting from DefaultOptions. Keys it does not know are ignored (the
// section holds many scheduler settings) and empty values mean the default.
// A bad value keeps the default for that key and is reported in the
// returned error (all bad keys, joined), so a caller may log and go on;
// except for allowed_hosts and denied_networks, whose bad entries make
// the policy refuse every host (HostPolicy.Invalid): a typo must not open
// what the operator meant to close.
// LocalURL and LocalHeaders are not config values and stay empty.
// The TLS keys are read as given; files are opened by their user
// (couchclient.Pool.Configure), which reports unreadable ones.
func OptionsFromConfig(replicatorSection map[string]string) (Options, error) {
	o := DefaultOptions()
	var errs []error
	intKey := func(key string, dst *int, min int) {
		v, ok := replicatorSection[key]
		if !ok || v == "" {
			return
		}
		n, err := strconv.Atoi(v)
		switch {
		case err != nil:
			errs = append(errs, newError("[replicator] "+reasonInteger(key)))
		case n < min && min == 0:
			errs = append(errs, newError("[replicator] "+reasonNonNegative(key)))
		case n < min:
			errs = append(errs, newError("[replicator] "+reasonPositive(key)))
		default:
			*dst = n
		}
	}
	boolKey := func(key string, dst *bool) {
		switch v := replicatorSection[key]; v {
		case "":
		case "true":
			*dst = true
		case "false":
			*dst = false
		default:
			errs = append(errs, newError("[replicator] "+reasonBoolean(key)))
		}
	}
	if v := replicatorSection["connect_to"]; v != "" {
		ct, err := ParseConnectTo(v)
		if err != nil {
			errs = append(errs, err)
		}
		o.ConnectTo = ct
	}
	if v := replicatorSection["allowed_hosts"]; v != "" {
		allowed, err := ParseAllowedHosts(v)
		if err != nil {
			errs = append(errs, err)
			o.Hosts.Invalid = true
		}
		o.Hosts.Allowed = allowed
	}
	if v := replicatorSection["denied_networks"]; v != "" {
		denied, err := ParseDeniedNetworks(v)
		if err != nil {
			errs = append(errs, err)
			o.Hosts.Invalid = true
		}
		o.Hosts.Denied = denied
	}
	intKey("worker_processes", &o.WorkerProcesses, 1)
	intKey("worker_batch_size", &o.WorkerBatchSize, 1)
	intKey("http_connections", &o.HTTPConnections, 1)
	intKey("connection_timeout", &o.ConnectionTimeout, 1)
	intKey("retries_per_request", &o.RetriesPerRequest, 0)
	intKey("checkpoint_interval", &o.CheckpointInterval, 1)
	// infinityKey reads a positive integer that may also be "infinity"
	// (stored as 0, CouchDB's default for these keys).
	infinityKey := func(key string, dst *int) {
		v, ok := replicatorSection[key]
		if !ok || v == "" {
			return
		}
		if v == "infinity" {
			*dst = 0
			return
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			errs = append(errs, newError("[replicator] "+reasonPositiveOrInfinity(key)))
			return
		}
		*dst = n
	}
	switch v := replicatorSection["doc_write_failure"]; v {
	case "", DocWriteFailureCount:
	case DocWriteFailureFail:
		o.DocWriteFailure = v
	default:
		errs = append(errs, newError("[replicator] "+reasonDocWriteFailure))
	}
	boolKey("use_checkpoints", &o.UseCheckpoints)
	boolKey("use_bulk_get", &o.UseBulkGet)
	if v := replicatorSection["socket_options"]; v != "" {
		o.SocketOptions = formatSocketOptions(parseSocketOptions(v))
	}
	infinityKey("max_document_id_length", &o.MaxDocumentIDLength)
	infinityKey("request_timeout", &o.RequestTimeout)
	intKey("missing_doc_retry_msec", &o.MissingDocRetryMsec, 1)
	if replicatorSection["max_batches_per_host"] == "infinity" {
		o.MaxBatchesPerHost = -1 // 0 is the default here
	} else {
		infinityKey("max_batches_per_host", &o.MaxBatchesPerHost)
	}
	infinityKey("max_requests_per_host", &o.MaxRequestsPerHost)
	boolKey("verify_ssl_certificates", &o.VerifySSLCertificates)
	depth := -1
	intKey("ssl_certificate_max_depth", &depth, 0)
	if depth >= 0 && depth != DefaultSSLCertificateMaxDepth {
		o.SSLCertificateMaxDepth = &depth
	}
	// A key set to its default is stored as unset, so Options read from a
	// config spelling out the defaults equal DefaultOptions.
	if o.MissingDocRetryMsec == DefaultMissingDocRetryMsec {
		o.MissingDocRetryMsec = 0
	}
	if o.MaxBatchesPerHost == DefaultMaxBatchesPerHost {
		o.MaxBatchesPerHost = 0
	}
	o.SSLTrustedCertificatesFile = replicatorSection["ssl_trusted_certificates_file"]
	o.CertFile = replicatorSection["cert_file"]
	o.KeyFile = replicatorSection["key_file"]
	o.Password = replicatorSection["password"]
	if (o.CertFile == "") != (o.KeyFile == "") {
		errs = append(errs, newError("[replicator] `cert_file` and `key_file` must be set together"))
		o.CertFile, o.KeyFile = "", ""
	}
	return o, errors.Join(errs...)
}

// reasonPositiveOrInfinity is the reason of a bad value of a key that takes
// a positive integer or "infinity".
func reasonPositiveOrInfinity(name string) string {
	return "`" + name + "` must be a positive integer or `infinity`"
}
