// Command docguard is a small couchepi plugin built with the sdk: a doc
// schema in matching dbs, fields hidden from non-admins, and an audit of
// writes served at GET /_docguard/stats. Its code is internal/docguard
// (see that package for the [docguard] configuration), shared with the
// host's tests.
//
// Build a second version for swap tests with
// go build -ldflags "-X main.version=v2" ./examples/docguard: v2 also
// requires the field "created_at".
package main

import (
	"github.com/couchepi/couchepi/internal/docguard"
	"github.com/couchepi/couchepi/sdk"
)

// version is set at link time (-X main.version=v2).
var version = "v1"

func main() {
	sdk.Serve(docguard.New(version))
}
