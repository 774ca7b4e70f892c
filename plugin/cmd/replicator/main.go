// Command replicator is couchepi's CouchDB replicator as a plugin: it
// validates `_replicator` docs at write time, turns them and
// `POST /_replicate` bodies into jobs, runs them with a CouchDB 4.x-style
// job server and serves the `_scheduler/*` monitoring routes.
// Build: go build -ldflags "-X main.version=1.2.3" -o bin/replicator ./plugin/cmd/replicator
package main

import (
	"github.com/couchepi/couchepi/internal/pprofserve"
	"github.com/couchepi/couchepi/sdk"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	pprofserve.FromEnv(sdk.Logger(), "COUCHEPI_REPLICATOR_PPROF")
	sdk.Serve(newReplicator(sdk.Logger()))
}
