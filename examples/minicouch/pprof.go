package main

import (
	"net/http"
	_ "net/http/pprof" // served only when MINICOUCH_PPROF is set
	"os"

	"github.com/hashicorp/go-hclog"
)

// servePprof serves Go's profiles on the address in MINICOUCH_PPROF (e.g.
// 127.0.0.1:6061), apart from the CouchDB API; unset, nothing listens.
func servePprof(log hclog.Logger) {
	addr := os.Getenv("MINICOUCH_PPROF")
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
