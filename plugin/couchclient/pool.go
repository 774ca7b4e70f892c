// Package couchclient is the replicator's HTTP client for CouchDB-compatible
// endpoints: a process-wide Pool (AIMD rate limiter, idle connection reuse per
// host and proxy) and a Client per endpoint (merged headers, session-cookie or
// basic auth, proxies, inactivity timeout, retries with backoff, 429 handling).
package couchclient

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
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
	// TLSConfig is used for https endpoints (nil = Go defaults).
	TLSConfig *tls.Config
	// HealthThreshold bounds the time spent retrying one request: half of it (default 120 s → 60 s).
	HealthThreshold time.Duration
	// RetryWait is the first wait between retries (default 250 ms); it doubles up to 5 minutes.
	RetryWait time.Duration
}

// Pool holds what many replications share: the rate limiter and idle
// connections (one http.Transport per scheme, host, port and proxy).
type Pool struct {
	opts    PoolOptions
	log     hclog.Logger
	limiter *RateLimiter
	stats   poolStats

	mu         sync.Mutex
	transports map[transportKey]*http.Transport
	stop       chan struct{}
	closeOnce  sync.Once
}

type transportKey struct {
	scheme, host, proxy string
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
		stop:       make(chan struct{}),
	}
	go p.closeIdleLoop()
	return p
}

// RateLimiter returns the pool's shared rate limiter.
func (p *Pool) RateLimiter() *RateLimiter { return p.limiter }

// Close closes idle connections and stops the pool's background work.
func (p *Pool) Close() error {
	p.closeOnce.Do(func() {
		close(p.stop)
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, t := range p.transports {
			t.CloseIdleConnections()
		}
	})
	return nil
}

func (p *Pool) closeIdleLoop() {
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

// transport returns the shared transport for u through proxyURL, creating it on first use.
func (p *Pool) transport(u *url.URL, proxyURL string, maxConns int) (*http.Transport, error) {
	key := transportKey{scheme: u.Scheme, host: hostPort(u), proxy: proxyURL}
	p.mu.Lock()
	defer p.mu.Unlock()
	if t, ok := p.transports[key]; ok {
		if maxConns > t.MaxIdleConnsPerHost {
			// Transport settings must not change once in use; a larger pool
			// only keeps more idle connections.
			t2 := t.Clone()
			t2.MaxIdleConnsPerHost = maxConns
			p.transports[key] = t2
			t.CloseIdleConnections()
			return t2, nil
		}
		return t, nil
	}
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	// No MaxConnsPerHost: http_connections bounds each endpoint of each
	// replication (Client's semaphore), not the host. Many replications to
	// one server each hold a connection open for their changes feed; a
	// host-wide cap of http_connections starved all but the first few.
	t := &http.Transport{
		DialContext:         dialer.DialContext,
		MaxIdleConnsPerHost: maxConns,
		MaxIdleConns:        0,
		IdleConnTimeout:     p.opts.ConnectionCloseInterval,
		TLSClientConfig:     p.opts.TLSConfig,
		ForceAttemptHTTP2:   false,
		DisableCompression:  true,
	}
	if proxyURL != "" {
		pu, err := url.Parse(proxyURL)
		if err != nil {
			return nil, fmt.Errorf("invalid proxy %s", parse.RedactURL(proxyURL))
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
			d, err := proxy.SOCKS5("tcp", pu.Host, auth, dialer)
			if err != nil {
				return nil, fmt.Errorf("invalid socks5 proxy %s", parse.RedactURL(proxyURL))
			}
			cd, ok := d.(proxy.ContextDialer)
			if !ok {
				return nil, fmt.Errorf("socks5 proxy %s is not supported", parse.RedactURL(proxyURL))
			}
			t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
				return cd.DialContext(ctx, network, addr)
			}
		default:
			return nil, fmt.Errorf("unsupported proxy protocol %q", pu.Scheme)
		}
	}
	p.transports[key] = t
	return t, nil
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
