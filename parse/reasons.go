package parse

import (
	"errors"
	"fmt"

	"github.com/couchepi/couchepi/internal/jsonobj"
)

// Reason texts of validation errors. Where CouchDB 4.x has a clean sentence
// it is used verbatim (note the double space in reasonMutuallyExclusive);
// the others are this package's own sentences (see the package doc).
const (
	reasonMutuallyExclusive = "`doc_ids`,`filter`,`selector` are mutually  exclusive"
	reasonDocIDsArray       = "`doc_ids` must be an array"
	reasonDocIDsStrings     = "`doc_ids` array must contain strings"
	reasonDocIDsUTF8        = "`doc_ids` must be valid UTF-8 once percent-decoded"
	reasonFilterString      = "`filter` must be a string"
	reasonFilterName        = "Invalid filter. Must match `ddocname/filtername`."
	reasonViewParam         = "Invalid `view` parameter."
	reasonQueryParams       = "`query_params` is not `null` or object"
	reasonSelectorObject    = "`selector` must be a JSON object"
	reasonCreateTargetPar   = "`create_target_params` must be an object"
	reasonSocketOptions     = "`socket_options` must be a string"
	reasonInvalidProxy      = "Invalid proxy url"
	reasonProxyProtocol     = "Unsupported proxy protocol"
	reasonHeadersObject     = "if defined `headers` must be an object"
	reasonHeaderValues      = "`headers` values must be strings"
	reasonAuthObject        = "if defined, `auth` must be an object"
	reasonUserCtxObject     = "`user_ctx` must be an object"
	reasonUserCtxName       = "`user_ctx.name` must be a string or null"
	reasonUserCtxRoles      = "`user_ctx.roles` must be an array of strings"
	reasonOtherUsers        = "Can't update replication documents from other users."
	reasonUserCtxNameClaim  = "The given `user_ctx.name` is not valid"
	reasonNotObject         = "Replication document must be a JSON object"
	reasonBodyNotObject     = "Request body must be a JSON object"
	reasonDocWriteFailure   = "`doc_write_failure` must be `count` or `fail`"
	reasonCheckpoint        = "`checkpoint` must be `both` or `target` (`use_checkpoints: false` writes none)"
)

func reasonMissing(side string) string { return "Missing `" + side + "` field" }

// reasonURLScheme words an endpoint URL with another scheme than http(s)
// (a typo such as htp://, or ftp://): no db name holds "://", so it is not
// a local endpoint either.
func reasonURLScheme(side, scheme string) string {
	return "`" + side + "` must be an http:// or https:// URL, not " + scheme + "://"
}

func reasonLocalEndpoint(side string) string {
	return "Local endpoints are not supported: `" + side + "` must be an http:// or https:// URL"
}

func reasonInvalidURL(side string) string { return "`" + side + "` has an invalid url" }

func reasonNeedsURL(side string) string { return "`" + side + "` must have a `url`" }

func reasonEndpointType(side string) string {
	return "`" + side + "` must be a URL string or an object"
}

func reasonBoolean(name string) string { return "`" + name + "` must be a boolean" }

func reasonInteger(name string) string { return "`" + name + "` must be an integer" }

func reasonPositive(name string) string { return "`" + name + "` must be a positive integer" }

func reasonNonNegative(name string) string {
	return "`" + name + "` must be a non-negative integer"
}

func reasonIDString(name string) string { return "`" + name + "` must be a string" }

func reasonProxyExclusive(other string) string {
	return "`proxy` is mutually exclusive with `" + other + "`"
}

func reasonUserCtxRoleClaim(role string) string {
	return fmt.Sprintf("Invalid role (`%s`) in the `user_ctx`", role)
}

func reasonSelector(detail string) string { return "`selector` is invalid: " + detail }

// notObject is the error for a doc (or, request, a _replicate body) that
// is not a JSON object: one nested deeper than JSON readers go says so
// rather than claim it is not an object.
func notObject(err error, request bool) *Error {
	what, reason := "Replication document", reasonNotObject
	if request {
		what, reason = "Request body", reasonBodyNotObject
	}
	if errors.Is(err, jsonobj.ErrTooDeep) {
		return newError(what + " is " + jsonobj.ErrTooDeep.Error())
	}
	return newError(reason)
}
