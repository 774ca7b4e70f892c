// Command docguard is a small couchepi plugin built with the sdk. It
// enforces a document schema in the dbs matching a configured pattern
// (before_doc_update), hides fields from non-admin readers (after_doc_read)
// and audits writes (after_doc_write, db create/delete, catch-up from the
// changes feed), serving its counters at GET /_docguard/stats.
//
// Configuration, section [docguard]:
//
//	dbs            = *_guarded       ; comma-separated db patterns to guard
//	required       = type,owner      ; fields every guarded doc must have
//	audit          = audit_*         ; extra db patterns audited (not guarded)
//	hidden         = secret          ; fields removed for non-admin readers
//	state_file     = /path/audit.log ; where the audit survives restarts
//	hang_for_tests = false           ; hang on docs with "_docguard_hang": true
//
// Build a second version for swap tests with
// go build -ldflags "-X main.version=v2" ./examples/docguard: v2 also
// requires the field "created_at".
package main

import "github.com/couchepi/couchepi/sdk"

// version is set at link time (-X main.version=v2).
var version = "v1"

func main() {
	sdk.Serve(newGuard(version))
}
