package couchclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/hashicorp/go-hclog"
)

// maxRetryWait caps the doubling wait between retries.
const maxRetryWait = 5 * time.Minute

// Client talks to one endpoint (a database URL). It is safe for concurrent
// use; at most http_connections requests are in flight at once, extra callers
// wait in line.
type Client struct {
	pool    *Pool
	ep      parse.Endpoint
	base    *url.URL
	baseErr error
	redBase string
	origin  string      // parse.Origin(base): where the endpoint's credentials may go
	headers http.Header // defaults, then the user's headers
	// defaults are the headers every request has unless the user's
	// replace them; userKeys are the user's (ep.Headers), canonical.
	defaults http.Header
	userKeys []string
	timeout  time.Duration
	retries  int
	conns    int
	sem      chan struct{}
	hcs      atomic.Pointer[clientTransport]
	auth     *session
	log      hclog.Logger
	failures failureLines // failed responses, for their log lines
	turns    *hostTurns   // of the endpoint's server (Request.Turn)
	budget   *hostBudget  // of the endpoint's server (budget.go)
	// restricted: the host policy applies to the endpoint's replication
	// (parse.Options.LimitsHosts), with a policy set or not.
	restricted bool
}

// clientTransport is a client's HTTP client on the pool's transport of one
// generation of TLS settings.
type clientTransport struct {
	gen uint64
	hc  *http.Client
}

// Endpoint returns the client of one endpoint of rep (rep supplies
// http_connections, connection_timeout and retries_per_request; nil rep =
// CouchDB defaults). The host policy of Configure applies to the endpoint
// unless rep is nil or was created by a server admin.
func (p *Pool) Endpoint(ep parse.Endpoint, rep *parse.Rep) *Client {
	conns, timeoutMS, retries := 20, 30000, 5
	if rep != nil {
		if rep.HTTPConnections > 0 {
			conns = rep.HTTPConnections
		}
		if rep.ConnectionTimeout > 0 {
			timeoutMS = rep.ConnectionTimeout
		}
		if rep.RetriesPerRequest >= 0 {
			retries = rep.RetriesPerRequest
		}
	}
	c := &Client{
		pool:    p,
		ep:      ep,
		redBase: ep.RedactedURL(),
		timeout: time.Duration(timeoutMS) * time.Millisecond,
		retries: retries,
		conns:   conns,
		sem:     make(chan struct{}, conns),
		log:     p.log.With("endpoint", ep.RedactedURL()),
		// Whether a policy is set is read at each request: it may change.
		restricted: rep != nil && !rep.UserCtx.IsAdmin(),
	}
	c.base, c.baseErr = url.Parse(ep.URL)
	if c.baseErr == nil && (c.base.Scheme != "http" && c.base.Scheme != "https" || c.base.Host == "") {
		c.baseErr = fmt.Errorf("unsupported endpoint URL %s", c.redBase)
	}
	c.defaults = http.Header{}
	c.defaults.Set("Accept", "application/json")
	c.defaults.Set("User-Agent", "CouchDB-Replicator/"+p.opts.Version)
	c.headers = c.defaults.Clone()
	for k, v := range ep.Headers {
		c.headers.Set(k, v)
		c.userKeys = append(c.userKeys, http.CanonicalHeaderKey(k))
	}
	if c.baseErr == nil {
		c.origin = parse.Origin(c.base)
		if _, err := c.httpClient(); err != nil {
			c.baseErr = err
		}
		// One server, however its URL spells it (case, default port).
		c.turns = p.turnsOf(c.origin)
		c.budget = p.budgetOf(c.origin)
	}
	c.auth = newSession(c)
	return c
}

// httpClient returns the client on the pool's current transport for the
// endpoint, switching to a new one after the pool's TLS settings changed.
func (c *Client) httpClient() (*http.Client, error) {
	if t := c.hcs.Load(); t != nil && t.gen == c.pool.gen.Load() {
		return t.hc, nil
	}
	tr, gen, err := c.pool.transport(c.base, c.ep.Proxy, c.conns, c.restricted)
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Transport: tr, CheckRedirect: c.checkRedirect}
	c.hcs.Store(&clientTransport{gen: gen, hc: hc})
	return hc, nil
}

// URL returns the endpoint's database URL (no credentials).
func (c *Client) URL() string { return c.ep.URL }

// RedactedURL returns the endpoint URL as logs and errors show it.
func (c *Client) RedactedURL() string { return c.redBase }

// UseLogger makes l, with the endpoint, the logger of c's lines: the
// logger of the job c serves, so that a failure c logs names it. Call it
// before c is used.
func (c *Client) UseLogger(l hclog.Logger) { c.log = l.With("endpoint", c.redBase) }

// Request is one HTTP request relative to the endpoint URL.
type Request struct {
	// Method is the HTTP method.
	Method string
	// Path is appended to the endpoint URL; it must already be escaped ("_changes", "_local/x").
	Path string
	// Query is the raw query string, without "?".
	Query string
	// Header adds or overrides headers (e.g. Accept: multipart/mixed).
	Header http.Header
	// Body is a replayable request body (sent with Content-Length).
	Body []byte
	// GetBody, when set, opens a fresh streamed body for every attempt; ContentLength -1 = chunked.
	GetBody       func(ctx context.Context) (io.ReadCloser, error)
	ContentLength int64
	// Buffer reads the whole response body inside the retry loop, so a
	// connection cut mid-body is retried like any connection error. For small
	// JSON answers only; feeds and attachments stream.
	Buffer bool
	// Reuse lets a buffered body be read into memory recycled from
	// responses given back with Release. Set it only when the response
	// will be released: memory taken by a response that never is, is lost
	// to later ones (_bulk_docs answers and the like would drain the
	// recycled _bulk_get buffers).
	Reuse bool
	// NoRetry sends the request once (still honouring the rate limiter and 429s).
	NoRetry bool
	// Feed marks a long-lived _changes feed request: request_timeout does
	// not apply to it (connection_timeout still does), and it takes no
	// place in its server's budget, though it waits out Retry-After holds
	// like any request (budget.go).
	Feed bool
	// Turn makes the request, retries included, wait its turn among the
	// batch writes (_revs_diff, _bulk_docs) to the endpoint's server:
	// `[replicator] max_batches_per_host` at once (see turns.go). For
	// Buffer requests, whose answer is read before Do returns.
	Turn bool
}

// Do sends r with CouchDB's replicator rules: rate limiter wait, auth, retries
// of 408/5xx/connection failures, 429 back-off, session refresh on 401/403;
// and couchepi's: every attempt waits for a place in its server's budget,
// shared by every client of the Pool (budget.go).
// Any status the rules do not retry is returned to the caller, who must close the body.
// The body is watched by the inactivity timeout (connection_timeout), and the
// whole request, body included, by request_timeout unless it is a Feed; a
// request that runs out of either is retried like any connection failure.
func (c *Client) Do(ctx context.Context, r *Request) (*http.Response, error) {
	if c.baseErr != nil {
		return nil, &Error{Kind: "http_request_failed", Method: r.Method, URL: c.redBase + r.Path, Reason: c.baseErr.Error()}
	}
	if r.Turn {
		done, err := c.takeTurn(ctx)
		if err != nil {
			return nil, err
		}
		defer done()
	}
	key := RateKey{URL: c.ep.URL, Method: r.Method}
	wait := c.pool.opts.RetryWait
	retries := c.retries
	if r.NoRetry {
		retries = 0
	}
	start := time.Now()
	refreshed := false
	rawURL := c.ep.URL + r.Path
	if r.Query != "" {
		rawURL += "?" + r.Query
	}
	redURL := c.redBase + r.Path
	// canRetry: a retry is left and the request has not been retried for
	// longer than half of health_threshold.
	canRetry := func() bool { return retries > 0 && time.Since(start) < c.pool.opts.HealthThreshold/2 }
	// backOff spends a retry: it waits, then doubles the next wait.
	backOff := func() error {
		retries--
		c.pool.stats.retries.Add(1)
		if err := Sleep(ctx, wait); err != nil {
			return err
		}
		wait = min(wait*2, maxRetryWait)
		return nil
	}
	for {
		if iv := c.pool.limiter.Interval(key); iv > 0 {
			if iv >= MaxInterval {
				c.pool.stats.maxBackoffs.Add(1)
				return nil, &Error{Kind: "max_backoff", Method: r.Method, URL: redURL, Reason: "max backoff reached"}
			}
			c.pool.stats.backoffs.Add(1)
			if err := Sleep(ctx, time.Duration(iv)*time.Millisecond); err != nil {
				return nil, err
			}
		}
		c.pool.stats.requests.Add(1)
		resp, err := c.once(ctx, r, rawURL)
		if errors.Is(err, errHeld) {
			// Not sent: the next attempt waits the hold out. Counted as a
			// 429 by the rate limiter, so that a server holding requests
			// without end fails them with max_backoff, as 429s do.
			c.pool.limiter.Failure(key)
			continue
		}
		if c.pool.stats.countResponse(ctx, err) {
			if logIt, unlogged := c.failures.add(time.Now()); logIt {
				c.log.Warn("request got no response; counted in responses_failure_total (logged at most once a minute)",
					"method", r.Method, "url", redURL, "error", err.Error(), "not_logged", unlogged)
			}
		}
		if err == nil && r.Buffer && resp.StatusCode != http.StatusTooManyRequests {
			err = c.pool.bufferBody(resp, r.Reuse)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if errors.Is(err, ErrFenced) {
				return nil, &Error{Kind: "http_request_failed", Method: r.Method, URL: redURL, Reason: err.Error(), Err: err}
			}
			// A peer certificate that fails verification, or a host the
			// policy forbids, fails the same way on every retry: say so at
			// once rather than after the backoff.
			var certErr *tls.CertificateVerificationError
			if !errors.As(err, &certErr) && !errors.Is(err, ErrNotAllowed) && canRetry() {
				c.log.Debug("retrying request", "method", r.Method, "url", redURL, "error", err.Error(), "wait", wait.String())
				if serr := backOff(); serr != nil {
					return nil, serr
				}
				continue
			}
			return nil, &Error{Kind: "http_request_failed", Method: r.Method, URL: redURL, Reason: err.Error(), Err: err}
		}
		c.auth.observe(resp)
		switch {
		case resp.StatusCode == http.StatusTooManyRequests:
			drain(resp)
			c.pool.stats.tooManyRequests.Add(1)
			iv := c.pool.limiter.Failure(key)
			c.log.Debug("429, backing off", "method", r.Method, "url", redURL, "interval_ms", iv)
			continue
		case resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode >= 500:
			c.pool.limiter.Success(key)
			if canRetry() {
				drain(resp)
				c.log.Debug("retrying request", "method", r.Method, "url", redURL, "status", resp.StatusCode, "wait", wait.String())
				if serr := backOff(); serr != nil {
					return nil, serr
				}
				continue
			}
			return resp, nil
		case (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) && !refreshed && c.auth.active():
			c.pool.limiter.Success(key)
			refreshed = true
			if c.auth.refreshAfterReject(ctx) {
				drain(resp)
				continue
			}
			return resp, nil
		default:
			c.pool.limiter.Success(key)
			return resp, nil
		}
	}
}

// once sends one attempt; the returned body releases the connection slot,
// the place in the server's budget when it still holds it, and stops the
// inactivity watchdog on Close.
func (c *Client) once(ctx context.Context, r *Request, rawURL string) (*http.Response, error) {
	fence := fenceOf(ctx)
	if err := fence.check(); err != nil {
		return nil, err
	}
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	// The budget is taken last and held only while the server answers
	// (budget.go): a request waiting for it holds nothing another
	// request needs to finish.
	ticket, err := c.budget.acquire(ctx, !r.Feed)
	if err != nil {
		<-c.sem
		return nil, err
	}
	if err := fence.check(); err != nil { // the wait may have been long
		ticket.done()
		<-c.sem
		return nil, err
	}
	rctx, cancel := context.WithCancelCause(ctx)
	wd := newWatchdog(c.timeout, cancel)
	var deadline *time.Timer
	if rt := c.pool.settings.Load().requestTimeout; rt > 0 && !r.Feed {
		deadline = time.AfterFunc(rt, func() { cancel(ErrRequestTimeout) })
	}
	stopTimers := func() {
		wd.stop()
		if deadline != nil {
			deadline.Stop()
		}
	}
	fail := func(err error) (*http.Response, error) {
		stopTimers()
		cancel(nil)
		ticket.done()
		<-c.sem
		return nil, err
	}
	if err := c.checkHost(c.base); err != nil {
		return fail(err)
	}
	hc, err := c.httpClient()
	if err != nil {
		return fail(err)
	}
	c.auth.refreshDue(ctx)
	if c.budget.held() {
		// A Retry-After came since the place was given (the answer to the
		// session login, say): send nothing before it passes.
		return fail(errHeld)
	}
	var body io.Reader
	var length int64
	switch {
	case r.GetBody != nil:
		rc, err := r.GetBody(rctx)
		if err != nil {
			return fail(err)
		}
		body, length = &resettingReader{rc: rc, wd: wd}, r.ContentLength
	case r.Body != nil:
		body, length = bytes.NewReader(r.Body), int64(len(r.Body))
	}
	if body != nil && fence != nil {
		body = &fencedReader{r: body, fence: fence}
	}
	req, err := http.NewRequestWithContext(c.withOwnHeaders(rctx, r), r.Method, rawURL, body)
	if err != nil {
		if rc, ok := body.(io.Closer); ok {
			rc.Close()
		}
		return fail(err)
	}
	if body != nil {
		req.ContentLength = length
		if length == 0 && r.Body != nil {
			req.Body = http.NoBody
		} else if r.Body != nil && fence != nil {
			// What NewRequest does for a *bytes.Reader, which the fence hides.
			req.GetBody = func() (io.ReadCloser, error) {
				return &fencedReader{r: bytes.NewReader(r.Body), fence: fence}, nil
			}
		}
	}
	for k, v := range c.headers {
		req.Header[k] = v
	}
	for k, v := range r.Header {
		req.Header[k] = v
	}
	c.auth.authorize(ctx, req)
	resp, err := hc.Do(req)
	if err != nil {
		if cause := timeoutCause(rctx); cause != nil {
			err = cause
		}
		return fail(err)
	}
	wd.reset()
	ticket.observe(resp.StatusCode, resp.Header)
	if !r.Buffer {
		// A streamed answer is read by the caller, who may send other
		// requests to the server meanwhile: its place ends here.
		ticket.done()
	}
	resp.Body = &watchedBody{rc: resp.Body, wd: wd, ctx: rctx, done: func() {
		if deadline != nil {
			deadline.Stop()
		}
		cancel(nil)
		ticket.done()
		<-c.sem
	}}
	return resp, nil
}

// ErrInactivity is the error of a request, or a body read, that saw no data for connection_timeout.
var ErrInactivity = errors.New("connection timeout: no data within connection_timeout")

// ErrRequestTimeout is the error of a request, or a body read, still
// unfinished after request_timeout.
var ErrRequestTimeout = errors.New("request timeout: not done within request_timeout")

// timeoutCause is ErrInactivity or ErrRequestTimeout when one of them ended
// ctx, else nil.
func timeoutCause(ctx context.Context) error {
	if cause := context.Cause(ctx); errors.Is(cause, ErrInactivity) || errors.Is(cause, ErrRequestTimeout) {
		return cause
	}
	return nil
}

type watchdog struct {
	d time.Duration
	t *time.Timer
}

func newWatchdog(d time.Duration, cancel context.CancelCauseFunc) *watchdog {
	return &watchdog{d: d, t: time.AfterFunc(d, func() { cancel(ErrInactivity) })}
}

func (w *watchdog) reset() { w.t.Reset(w.d) }
func (w *watchdog) stop()  { w.t.Stop() }

// watchedBody resets the inactivity timer on every read and frees the
// connection slot once on Close.
type watchedBody struct {
	rc     io.ReadCloser
	wd     *watchdog
	ctx    context.Context
	done   func()
	closed bool
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 {
		b.wd.reset()
	}
	if err != nil && err != io.EOF {
		if cause := timeoutCause(b.ctx); cause != nil {
			err = cause
		}
	}
	return n, err
}

func (b *watchedBody) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	b.wd.stop()
	err := b.rc.Close()
	b.done()
	return err
}

// resettingReader resets the inactivity timer while a streamed request body is being sent.
type resettingReader struct {
	rc io.ReadCloser
	wd *watchdog
}

func (r *resettingReader) Read(p []byte) (int, error) {
	n, err := r.rc.Read(p)
	if n > 0 {
		r.wd.reset()
	}
	return n, err
}

func (r *resettingReader) Close() error { return r.rc.Close() }

// WriteTo lets the transport send a body that writes itself (an
// attachment streamed in large pieces) in those pieces rather than in
// its 32 KiB copy buffer's, the timer reset at each.
func (r *resettingReader) WriteTo(w io.Writer) (int64, error) {
	return writeThrough(r.rc, w, func() error { r.wd.reset(); return nil })
}

// writeThrough copies src to w, with src's WriteTo when it has one, and
// calls each before every piece written (an error stops the copy).
func writeThrough(src io.Reader, w io.Writer, each func() error) (int64, error) {
	hw := hookedWriter{w: w, each: each}
	if wt, ok := src.(io.WriterTo); ok {
		return wt.WriteTo(hw)
	}
	return io.Copy(hw, struct{ io.Reader }{src})
}

// hookedWriter calls each before passing on every piece of a write, of
// at most maxHookedPiece bytes (a body that writes itself whole, a
// bytes.Reader's, is still fenced and shows progress as it goes).
type hookedWriter struct {
	w    io.Writer
	each func() error
}

const maxHookedPiece = 256 << 10

func (h hookedWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		if err := h.each(); err != nil {
			return n, err
		}
		k, err := h.w.Write(p[:min(len(p), maxHookedPiece)])
		n += k
		if err != nil {
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}

// bufferBody replaces resp.Body with its whole content, read now, into a
// buffer the pool recycled when reuse is set and one is free.
func (p *Pool) bufferBody(resp *http.Response, reuse bool) error {
	var buf *bytes.Buffer
	if reuse {
		select {
		case buf = <-p.freeBodies:
			buf.Reset()
		default:
		}
	}
	if buf == nil {
		buf = new(bytes.Buffer)
	}
	if n := resp.ContentLength; n > 0 && n < maxPresize {
		buf.Grow(int(n) + bytes.MinRead)
	}
	_, err := buf.ReadFrom(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	data := buf.Bytes()
	resp.Body = &bufferedBody{Reader: bytes.NewReader(data), data: data, buf: buf, free: p.freeBodies}
	return nil
}

// maxPresize bounds the buffer allocated up front from a response's
// Content-Length (a larger body still grows as it arrives).
const maxPresize = 64 << 20

// maxPooled is the largest buffer kept for reuse by Release.
const maxPooled = 8 << 20

// maxFreeBodies bounds the buffers a Pool keeps for reuse (at most
// maxFreeBodies × maxPooled bytes; see Pool.freeBodies).
const maxFreeBodies = 16

// bufferedBody is a response body read into memory by Do (Request.Buffer).
type bufferedBody struct {
	*bytes.Reader
	data []byte
	buf  *bytes.Buffer
	free chan<- *bytes.Buffer // the pool's free buffers, where Release puts buf
}

// Close does nothing: the connection was released when the body was read.
func (*bufferedBody) Close() error { return nil }

// Bytes returns the whole body of resp and closes it. For a response
// buffered by Do (Request.Buffer) this is the buffer itself, not a copy;
// otherwise the body is read.
func Bytes(resp *http.Response) ([]byte, error) {
	if b, ok := resp.Body.(*bufferedBody); ok && b.Reader.Size() == int64(b.Reader.Len()) {
		return b.data, nil
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// Release hands the memory of a response buffered by Do back to its Pool
// for reuse by later responses. Neither the body nor any slice Bytes returned for it may
// be used afterwards. It does nothing for other responses.
func Release(resp *http.Response) {
	b, ok := resp.Body.(*bufferedBody)
	if !ok || b.buf == nil {
		return
	}
	buf := b.buf
	b.buf, b.data = nil, nil
	b.Reader.Reset(nil)
	if buf.Cap() <= maxPooled {
		select {
		case b.free <- buf:
		default:
		}
	}
}

// drain discards a small remainder of a body so the connection can be reused, then closes it.
func drain(resp *http.Response) {
	io.CopyN(io.Discard, resp.Body, 64<<10)
	resp.Body.Close()
}

// Sleep waits d, returning early with ctx's error; the wait between
// retries of the client and of the replicator's own fetches.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Jitter returns a random duration in [0, d); used by callers spreading retries.
func Jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(d)))
}

// Error is a request that failed after the retry rules gave up.
type Error struct {
	// Kind is "http_request_failed" or "max_backoff".
	Kind string
	// Method and URL (redacted) of the request.
	Method, URL string
	// Reason is the last failure.
	Reason string
	// Err is the last failure's error when it was not an HTTP status (a
	// connection, TLS or timeout error), for errors.Is and errors.As.
	Err error
}

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// Error renders "<kind>: <METHOD> <url>: <reason>"; it never contains a password.
func (e *Error) Error() string {
	return e.Kind + ": " + e.Method + " " + e.URL + ": " + redactText(e.Reason)
}

// redactText removes any "user:password@" that a lower layer put into a message.
func redactText(s string) string {
	for _, scheme := range []string{"http://", "https://"} {
		idx := 0
		for {
			i := strings.Index(s[idx:], scheme)
			if i < 0 {
				break
			}
			i += idx + len(scheme)
			end := strings.IndexAny(s[i:], " \"'/")
			if end < 0 {
				end = len(s) - i
			}
			if at := strings.LastIndexByte(s[i:i+end], '@'); at >= 0 {
				if colon := strings.IndexByte(s[i:i+at], ':'); colon >= 0 {
					s = s[:i+colon+1] + "*****" + s[i+at:]
				}
			}
			idx = i
		}
	}
	return s
}

// RedactedProxy returns the endpoint's proxy URL without credentials, or ""
// when it has none.
func (c *Client) RedactedProxy() string {
	if c.ep.Proxy == "" {
		return ""
	}
	return parse.RedactURL(c.ep.Proxy)
}
