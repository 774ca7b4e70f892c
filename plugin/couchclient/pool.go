// Package couchclient is the replicator's HTTP client for CouchDB-compatible
// endpoints: a Pool shared by a process's replications (AIMD rate limiter,
// idle connection reuse per host and proxy) and a Client per endpoint
// (merged headers, session-cookie or basic auth, proxies, inactivity
// timeout, retries with backoff, 429 handling). It is public for programs
// that run replications themselves (package replicate takes a Pool) or
// talk to CouchDB endpoints as the replicator does.
package couchclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/net/proxy"
)

// DefaultVersion is the version in the User-Agent header when PoolOptions.Version is empty.
const DefaultVersion = "3.5.0"

// PoolOptions configures a Pool.
type PoolOptions struct {
	// Logger receives structured, credential-free logs (nil = discard).
	Logger hclog.Logger
	// Now is the clock of the rate limiter (nil = time.Now).
	Now func() time.Time
	// Version goes into "User-Agent: CouchDB-Replicator/<Version>".
	Version string
	// ConnectionCloseInterval closes idle connections this often (default 90 s).
	ConnectionCloseInterval time.Duration
	// TLSConfig is used for https endpoints (nil = Go defaults); Configure
	// applies the `[replicator]` TLS keys on top of it.
	TLSConfig *tls.Config
	// HealthThreshold bounds the time spent retrying one request: half of it (default 120 s → 60 s).
	HealthThreshold time.Duration
	// RetryWait is the first wait between retries (default 250 ms); it doubles up to 5 minutes.
	RetryWait time.Duration
	// LocalURL is the server's own base URL ("http://127.0.0.1:5984/"):
	// restricted replications may always reach its origin, whatever
	// `[replicator]` allowed_hosts and denied_networks say, so that local
	// dbs given by name keep working.
	LocalURL string
}

// Pool holds what many replications share: the rate limiter, idle
// connections (one http.Transport per scheme, host, port and proxy), the
// batch turns and the request budget of each server (turns.go, budget.go).
type Pool struct {
	opts    PoolOptions
	log     hclog.Logger
	limiter *RateLimiter
	stats   poolStats

	// localOrigin and localAddr are PoolOptions.LocalURL's origin and
	// host:port ("" without one).
	localOrigin, localAddr string

	// settings are the runtime `[replicator]` settings (Configure).
	settings atomic.Pointer[poolSettings]

	// The host budgets' gauges (BudgetState).
	budgetWaiting, hostsHeld, hostsCongested atomic.Int64

	// freeBodies holds the buffers of released responses: a replication
	// reads hundreds of similar _bulk_get answers of ~0.5 MB each, mostly
	// chunked (no Content-Length to presize from). A sync.Pool is emptied
	// by every other garbage collection, which at replication rates left
	// most answers growing a new buffer from 512 bytes by doubling
	// (allocating and zeroing each step); this list keeps up to
	// maxFreeBodies buffers across collections.
	freeBodies chan *bytes.Buffer

	mu         sync.Mutex
	transports map[transportKey]*http.Transport
	turns      map[string]*hostTurns  // by target server (turns.go)
	budgets    map[string]*hostBudget // by server (budget.go)
	gen        atomic.Uint64          // bumped when the transports' TLS config changes
	stop       chan struct{}
	idleDone   chan struct{} // closed when closeIdleLoop has returned
	closeOnce  sync.Once

	// tuneDialer, when set (by tests, before the first request), adjusts
	// the dialer of every new transport: a Control that sees each address
	// about to be connected to, after the host policy let it through, and
	// a Resolver that may not send DNS queries.
	tuneDialer func(*net.Dialer)
}

// poolSettings are what Configure last set.
type poolSettings struct {
	opts           parse.Options
	tls            *tls.Config
	requestTimeout time.Duration
	configured     bool // by Configure (not NewPool's defaults)
}

type transportKey struct {
	scheme, host, proxy string
	// guarded transports, for restricted replications (the default
	// policy limits them too), check where they connect (guard); they
	// share no connection with the others.
	guarded bool
}

// NewPool returns a Pool; call Close when no replication uses it any more.
func NewPool(opts PoolOptions) *Pool {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Version == "" {
		opts.Version = DefaultVersion
	}
	if opts.ConnectionCloseInterval <= 0 {
		opts.ConnectionCloseInterval = 90 * time.Second
	}
	if opts.HealthThreshold <= 0 {
		opts.HealthThreshold = 120 * time.Second
	}
	if opts.RetryWait <= 0 {
		opts.RetryWait = 250 * time.Millisecond
	}
	p := &Pool{
		opts:       opts,
		log:        opts.Logger,
		limiter:    NewRateLimiter(opts.Now),
		transports: map[transportKey]*http.Transport{},
		turns:      map[string]*hostTurns{},
		budgets:    map[string]*hostBudget{},
		freeBodies: make(chan *bytes.Buffer, maxFreeBodies),
		stop:       make(chan struct{}),
		idleDone:   make(chan struct{}),
	}
	if u, err := url.Parse(opts.LocalURL); err == nil && opts.LocalURL != "" {
		p.localOrigin = parse.Origin(u)
		p.localAddr = strings.TrimPrefix(p.localOrigin, strings.ToLower(u.Scheme)+"://")
	}
	p.settings.Store(&poolSettings{opts: parse.DefaultOptions(), tls: opts.TLSConfig})
	go p.closeIdleLoop()
	return p
}

// Configure applies the pool-wide `[replicator]` settings: request_timeout
// and the host policy (allowed_hosts, denied_networks) at once for every
// later request, and the TLS keys (verify_ssl_certificates,
// ssl_trusted_certificates_file, ssl_certificate_max_depth, cert_file,
// key_file, password) to connections opened from now on: the pool drops its
// idle connections and clients switch to new transports at their next
// request, as they do when the host policy changes (no connection made
// under the old one is used again). PoolOptions.TLSConfig, if set, is the base the TLS keys are
// applied to. A TLS file that cannot be used keeps that key's default and is
// reported in the returned error, as a config error to log.
func (p *Pool) Configure(o parse.Options) error {
	cfg, err := tlsConfig(p.opts.TLSConfig, o)
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.settings.Load()
	p.settings.Store(&poolSettings{opts: o, tls: cfg, requestTimeout: time.Duration(o.RequestTimeout) * time.Millisecond, configured: true})
	if !old.configured || tlsKeysChanged(old.opts, o) || !slices.Equal(old.opts.ConnectTo, o.ConnectTo) || !old.opts.Hosts.Equal(o.Hosts) {
		for _, t := range p.transports {
			t.CloseIdleConnections()
		}
		p.transports = map[transportKey]*http.Transport{}
		p.gen.Add(1)
	}
	return err
}

// Options returns the `[replicator]` options Configure last set
// (DefaultOptions before). It holds `password`: never log it.
func (p *Pool) Options() parse.Options { return p.settings.Load().opts }

// tlsKeysChanged reports whether two configs differ in a TLS key. The
// files' contents are not compared: a changed file is picked up by
// setting the config again with another value, or by a restart.
func tlsKeysChanged(a, b parse.Options) bool {
	return a.VerifySSLCertificates != b.VerifySSLCertificates ||
		a.SSLTrustedCertificatesFile != b.SSLTrustedCertificatesFile ||
		a.CertificateMaxDepth() != b.CertificateMaxDepth() ||
		a.CertFile != b.CertFile || a.KeyFile != b.KeyFile || a.Password != b.Password
}

// RateLimiter returns the pool's shared rate limiter.
func (p *Pool) RateLimiter() *RateLimiter { return p.limiter }

// RetryWindow is how long a request is retried at most: half of
// health_threshold (60 s by default), as CouchDB's. A caller retrying on
// its own (a changes feed that went silent) gives up after it too.
func (p *Pool) RetryWindow() time.Duration { return p.opts.HealthThreshold / 2 }

// Close closes idle connections and stops the pool's background work,
// returning once it has stopped. Retry-After holds end (their timers
// stopped), letting any request still waiting go.
func (p *Pool) Close() error {
	p.closeOnce.Do(func() {
		close(p.stop)
		p.mu.Lock()
		for _, t := range p.transports {
			t.CloseIdleConnections()
		}
		budgets := make([]*hostBudget, 0, len(p.budgets))
		for _, b := range p.budgets {
			budgets = append(budgets, b)
		}
		p.mu.Unlock()
		for _, b := range budgets {
			b.close()
		}
	})
	<-p.idleDone
	return nil
}

func (p *Pool) closeIdleLoop() {
	defer close(p.idleDone)
	t := time.NewTicker(p.opts.ConnectionCloseInterval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.mu.Lock()
			for _, tr := range p.transports {
				tr.CloseIdleConnections()
			}
			p.mu.Unlock()
		}
	}
}

// hostIdleConns is the least number of idle connections kept per host:
// the replications reading from or writing to one server share them.
// Keeping only one replication's http_connections made every request
// beyond them dial anew (with 1,000 replications from one server, a fifth
// of the plugin's CPU went to connecting). Idle ones still close after
// connection_close_interval.
const hostIdleConns = 512

// transport returns the shared transport for u through proxyURL, creating
// it on first use, and the generation of the pool's TLS settings it has.
// restricted asks for a transport that applies the host policy (unless
// it is Unlimited).
func (p *Pool) transport(u *url.URL, proxyURL string, maxConns int, restricted bool) (*http.Transport, uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	gen := p.gen.Load()
	guarded := restricted && !p.settings.Load().opts.Hosts.Unlimited
	key := transportKey{scheme: u.Scheme, host: hostPort(u), proxy: proxyURL, guarded: guarded}
	if t, ok := p.transports[key]; ok {
		if maxConns > t.MaxIdleConnsPerHost {
			// Transport settings must not change once in use; a larger pool
			// only keeps more idle connections.
			t2 := t.Clone()
			t2.MaxIdleConnsPerHost = maxConns
			p.transports[key] = t2
			t.CloseIdleConnections()
			return t2, gen, nil
		}
		return t, gen, nil
	}
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	if p.tuneDialer != nil {
		p.tuneDialer(dialer)
	}
	// No MaxConnsPerHost: http_connections bounds each endpoint of each
	// replication (Client's semaphore), not the host. Many replications to
	// one server each hold a connection open for their changes feed; a
	// host-wide cap of http_connections starved all but the first few.
	dial := p.connectTo(dialer.DialContext)
	var forward proxy.Dialer = dialer // of a SOCKS5 proxy
	if guarded {
		dial = p.guard(dialer)
		forward = dialFunc(dial)
	}
	t := &http.Transport{
		DialContext:         dial,
		MaxIdleConnsPerHost: max(maxConns, hostIdleConns),
		MaxIdleConns:        0,
		IdleConnTimeout:     p.opts.ConnectionCloseInterval,
		TLSClientConfig:     p.settings.Load().tls,
		ForceAttemptHTTP2:   false,
		DisableCompression:  true,
	}
	if proxyURL != "" {
		pu, err := url.Parse(proxyURL)
		if err != nil {
			return nil, 0, fmt.Errorf("invalid proxy %s", parse.RedactURL(proxyURL))
		}
		switch strings.ToLower(pu.Scheme) {
		case "http", "https":
			t.Proxy = http.ProxyURL(pu)
		case "socks5", "socks5h":
			var auth *proxy.Auth
			if pu.User != nil {
				pw, _ := pu.User.Password()
				auth = &proxy.Auth{User: pu.User.Username(), Password: pw}
			}
			d, err := proxy.SOCKS5("tcp", pu.Host, auth, forward)
			if err != nil {
				return nil, 0, fmt.Errorf("invalid socks5 proxy %s", parse.RedactURL(proxyURL))
			}
			cd, ok := d.(proxy.ContextDialer)
			if !ok {
				return nil, 0, fmt.Errorf("socks5 proxy %s is not supported", parse.RedactURL(proxyURL))
			}
			t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
				return cd.DialContext(ctx, network, addr)
			}
		default:
			return nil, 0, fmt.Errorf("unsupported proxy protocol %q", pu.Scheme)
		}
	}
	counted := t.DialContext
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := counted(ctx, network, addr)
		if err == nil {
			p.stats.connectionsCreated.Add(1)
		}
		return c, err
	}
	p.transports[key] = t
	return t, gen, nil
}

// connectTo wraps dial so that an address matching a `[replicator]
// connect_to` override is dialled at its target instead; the request keeps
// the original host for its Host header, TLS server name and certificate
// check.
func (p *Pool) connectTo(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if list := p.settings.Load().opts.ConnectTo; len(list) > 0 {
			if host, port, err := net.SplitHostPort(addr); err == nil {
				if n, err := strconv.Atoi(port); err == nil {
					if target, ok := parse.ResolveConnectTo(list, host, n); ok {
						addr = target
					}
				}
			}
		}
		return dial(ctx, network, addr)
	}
}

func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	if u.Scheme == "https" {
		return u.Hostname() + ":443"
	}
	return u.Hostname() + ":80"
}
