// Package docguard is a small couchepi plugin built with the sdk: it
// enforces a document schema in the dbs matching a configured pattern
// (before_doc_update), hides fields from non-admin readers (after_doc_read)
// and audits writes (after_doc_write, db create/delete, catch-up from the
// changes feed), serving its counters at GET /_docguard/stats.
//
// It is the plugin the host's tests run (their test binary serves it when
// started under the name docguard-v1 or docguard-v2) and the plugin
// examples/docguard builds, so the host is tested without building
// anything under examples/.
//
// Configuration, section [docguard]:
//
//	dbs            = *_guarded       ; comma-separated db patterns to guard
//	required       = type,owner      ; fields every guarded doc must have
//	audit          = audit_*         ; extra db patterns audited (not guarded)
//	hidden         = secret          ; fields removed for non-admin readers
//	state_file     = /path/audit.log ; where the audit survives restarts
//	hang_for_tests = false           ; hang on docs with "_docguard_hang": true
package docguard
