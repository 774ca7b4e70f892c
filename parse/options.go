package parse

import (
	"errors"
	"strconv"
)

// OptionsFromConfig reads the `[replicator]` config section into Options,
// starting from DefaultOptions. Keys it does not know are ignored (the
// section holds many scheduler settings) and empty values mean the default.
// A bad value keeps the default for that key and is reported in the
// returned error (all bad keys, joined), so a caller may log and go on.
// LocalURL and LocalHeaders are not config values and stay empty.
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
	intKey("worker_processes", &o.WorkerProcesses, 1)
	intKey("worker_batch_size", &o.WorkerBatchSize, 1)
	intKey("http_connections", &o.HTTPConnections, 1)
	intKey("connection_timeout", &o.ConnectionTimeout, 1)
	intKey("retries_per_request", &o.RetriesPerRequest, 0)
	intKey("checkpoint_interval", &o.CheckpointInterval, 1)
	boolKey("use_checkpoints", &o.UseCheckpoints)
	boolKey("use_bulk_get", &o.UseBulkGet)
	if v := replicatorSection["socket_options"]; v != "" {
		o.SocketOptions = formatSocketOptions(parseSocketOptions(v))
	}
	return o, errors.Join(errs...)
}
