package replicate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/couchclient"
)

// statusError turns an unexpected response into an *Error of the given kind:
// "<status> <METHOD> <url>: <error>: <reason>" (the body's CouchDB error, if any).
func statusError(kind string, resp *http.Response, method, redURL string) *Error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	var ce struct {
		Error  string `json:"error"`
		Reason string `json:"reason"`
	}
	detail := ""
	if json.Unmarshal(body, &ce) == nil && ce.Error != "" {
		detail = ": " + ce.Error
		if ce.Reason != "" {
			detail += ": " + ce.Reason
		}
	}
	reason := fmt.Sprintf("%d %s %s%s", resp.StatusCode, method, parse.RedactURL(redURL), detail)
	return newError(kind, reason, resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden)
}

// asError converts a client failure into an *Error (http_request_failed, max_backoff) unchanged in meaning.
func asError(err error) *Error {
	var re *Error
	if errors.As(err, &re) {
		return re
	}
	var ce *couchclient.Error
	if errors.As(err, &ce) {
		return newError(ce.Kind, ce.Method+" "+ce.URL+": "+ce.Reason, false)
	}
	return newError("replication_failed", redactAll(err.Error()), false)
}

// redactAll hides anything that looks like a password in a URL inside s.
func redactAll(s string) string {
	fields := strings.Fields(s)
	for i, f := range fields {
		if strings.Contains(f, "://") && strings.Contains(f, "@") {
			fields[i] = parse.RedactURL(strings.Trim(f, `"'`))
		}
	}
	return strings.Join(fields, " ")
}

// maxBackoff returns the max_backoff failure in err, if that is what it is:
// it must reach the job server as such (it restarts the job with lower settings).
func maxBackoff(err error) *Error {
	var ce *couchclient.Error
	if errors.As(err, &ce) && ce.Kind == "max_backoff" {
		return asError(ce)
	}
	return nil
}

// openFailure words why an endpoint could not be opened, naming the cause
// (CouchDB 3.x says "could not open <url>" for every one): connection
// refused, timeout, TLS, HTTP status, or the proxy that could not be
// reached. It never includes credentials.
func openFailure(c *couchclient.Client, err error, status string) string {
	msg := "could not open " + c.RedactedURL()
	if status != "" {
		return msg + ": the server answered " + status
	}
	var proxyAddr string
	if p := c.RedactedProxy(); p != "" {
		if u, perr := url.Parse(p); perr == nil {
			proxyAddr = u.Host
		}
	}
	var op *net.OpError
	isOp := errors.As(err, &op)
	viaProxy := c.RedactedProxy() != "" && isOp && (op.Op == "proxyconnect" || op.Addr != nil && sameHostPort(op.Addr.String(), proxyAddr))
	var cause string
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		cause = "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		cause = "connection reset"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		cause = "host unreachable"
	case errors.As(err, &ne) && ne.Timeout():
		cause = "timed out"
	default:
		var ue *url.Error
		inner := err
		if errors.As(err, &ue) {
			inner = ue.Err // url.Error repeats the URL, credentials included
		}
		cause = redactAll(inner.Error())
	}
	if viaProxy {
		return msg + ": proxy " + c.RedactedProxy() + " unreachable: " + cause
	}
	return msg + ": " + cause
}

// sameHostPort compares two host:port strings, treating "localhost" and
// the loopback address alike only when equal as written.
func sameHostPort(a, b string) bool { return a != "" && b != "" && a == b }
