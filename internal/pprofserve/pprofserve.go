// Package pprofserve serves Go's profiles (net/http/pprof) on an address
// an environment variable names, for operators and benchmarks chasing CPU
// or memory use. Unset, nothing listens.
package pprofserve

import (
	"net/http"
	_ "net/http/pprof" // registers the profiles on http.DefaultServeMux
	"os"

	"github.com/hashicorp/go-hclog"
)

// FromEnv serves the profiles on the address in the environment variable
// env (e.g. 127.0.0.1:6060), in the background; unset, it does nothing.
func FromEnv(log hclog.Logger, env string) {
	addr := os.Getenv(env)
	if addr == "" {
		return
	}
	go func() {
		log.Info("serving Go profiles", "addr", addr)
		if err := http.ListenAndServe(addr, nil); err != nil {
			log.Warn("pprof listener", "error", err)
		}
	}()
}
