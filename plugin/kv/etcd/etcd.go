package etcd

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
	"github.com/hashicorp/go-hclog"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// DefaultPrefix is the key prefix used when Config.Prefix is empty.
const DefaultPrefix = "couchepi/"

// ErrTooLarge is returned when a transaction's commit is larger than etcd
// accepts in one request; it is also kv.ErrTooLarge (errors.Is).
var ErrTooLarge error = tooLargeError{}

type tooLargeError struct{}

func (tooLargeError) Error() string        { return "kv/etcd: transaction too large for one etcd request" }
func (tooLargeError) Is(target error) bool { return target == kv.ErrTooLarge }

// ErrUnknownResult is returned when the store could not learn whether a
// commit was applied (etcd unreachable while resolving it).
var ErrUnknownResult = errors.New("kv/etcd: commit result unknown")

// Config configures a Store. The zero value of every field but Client or
// Endpoints is usable.
type Config struct {
	// Client is an etcd client to use; when nil, Open dials Endpoints with
	// Username, Password and TLS, and Close closes that client.
	Client *clientv3.Client
	// Endpoints are etcd client URLs, e.g. http://127.0.0.1:2379.
	Endpoints []string
	// Username and Password authenticate to etcd when set.
	Username, Password string
	// TLS settings for https endpoints: PEM files, all optional.
	CertFile, KeyFile, CAFile string
	// Prefix namespaces every key; DefaultPrefix when empty.
	Prefix string
	// DialTimeout bounds the first connection; 5s when zero.
	DialTimeout time.Duration
	// CleanInterval is how often old tombstones are removed and so the
	// longest a transaction may run before it must retry; 10s when zero.
	CleanInterval time.Duration
	// CompactInterval is how often etcd's history is compacted, keeping
	// one interval of it (compact.go); DefaultCompactInterval when zero,
	// never when negative (etcd's --auto-compaction-retention then has
	// to). It is kept at least 3 × CleanInterval.
	CompactInterval time.Duration
	// Logger receives warnings (lost leases, cleaner errors).
	Logger hclog.Logger

	// leaseTTL and stampFresh replace defaultLeaseTTL and
	// defaultStampFresh when set (by tests, export_test.go).
	leaseTTL   int64
	stampFresh time.Duration
}

// Store is a kv.Store on etcd. It is safe for concurrent use by many
// goroutines and many processes sharing the same etcd and prefix.
type Store struct {
	cli       *clientv3.Client
	ownClient bool
	log       hclog.Logger

	dataPrefix, tombPrefix    []byte
	vsKey, horizonKey, marker []byte
	compactKey                []byte
	stamps                    stampCounter
	leaseTTL                  int64         // seconds; defaultLeaseTTL
	stampFresh                time.Duration // defaultStampFresh

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the store's goroutines; Close waits for them
	goMu   sync.Mutex     // orders goBackground's wg.Add before Close's Wait

	leaseMu   sync.Mutex
	lease     clientv3.LeaseID
	leaseOK   bool
	leaseAt   time.Time          // when lease was granted
	leaseStop context.CancelFunc // ends lease's keepalives
}

// defaultLeaseTTL is how many seconds a commit marker outlives its lease's last
// keepalive. Markers only serve a commit whose outcome is unknown, for
// half that long (resolve), so commits take a new lease every leaseTTL/2
// and let the old one expire with its markers: every commit leaves a
// marker, and on one lease kept alive they would pile up in etcd as long
// as the process runs. A lease's last keepalive comes at most leaseTTL/3
// before its successor is granted, so a marker lives at least
// leaseTTL*2/3 after its commit began, longer than resolve looks for it.
const defaultLeaseTTL = 60

// Open connects to etcd and returns the store. It fails when etcd cannot
// be reached within DialTimeout.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	if cfg.CleanInterval == 0 {
		cfg.CleanInterval = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.leaseTTL == 0 {
		cfg.leaseTTL = defaultLeaseTTL
	}
	if cfg.stampFresh == 0 {
		cfg.stampFresh = defaultStampFresh
	}
	cli, own := cfg.Client, false
	if cli == nil {
		tlsConf, err := tlsConfig(cfg)
		if err != nil {
			return nil, err
		}
		cli, err = clientv3.New(clientv3.Config{
			Endpoints:   cfg.Endpoints,
			Username:    cfg.Username,
			Password:    cfg.Password,
			TLS:         tlsConf,
			DialTimeout: cfg.DialTimeout,
			// A member that goes silent without closing its connections
			// (a partition, a paused VM) leaves the balancer's choices
			// once a ping goes unanswered, instead of costing every
			// request sent to it an attempt (failover.go). gRPC pings no
			// more often than every 10 s.
			DialKeepAliveTime:    10 * time.Second,
			DialKeepAliveTimeout: 3 * time.Second,
			Logger:               zap.NewNop(),
			Context:              context.Background(),
		})
		if err != nil {
			return nil, fmt.Errorf("kv/etcd: connect %v: %w", cfg.Endpoints, err)
		}
		own = true
	}
	p := cfg.Prefix
	s := &Store{
		cli:        cli,
		ownClient:  own,
		log:        cfg.Logger,
		dataPrefix: []byte(p + "d/"),
		tombPrefix: []byte(p + "t/"),
		vsKey:      []byte(p + "m/vs"),
		horizonKey: []byte(p + "m/horizon"),
		marker:     []byte(p + "m/c/"),
		compactKey: []byte(p + "m/compacted"),
		leaseTTL:   cfg.leaseTTL,
		stampFresh: cfg.stampFresh,
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	octx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	_, err := cli.Txn(octx).
		If(clientv3.Compare(clientv3.Version(string(s.horizonKey)), "=", 0)).
		Then(clientv3.OpPut(string(s.horizonKey), string(revBytes(0)))).
		Commit()
	if err == nil {
		_, err = cli.Txn(octx).
			If(clientv3.Compare(clientv3.Version(string(s.compactKey)), "=", 0)).
			Then(clientv3.OpPut(string(s.compactKey), string(revBytes(0)))).
			Commit()
	}
	if err == nil {
		err = s.initStamps(octx)
	}
	if err != nil {
		s.cancel()
		if own {
			cli.Close()
		}
		return nil, fmt.Errorf("kv/etcd: init %v: %w", cfg.Endpoints, err)
	}
	s.wg.Add(1)
	go s.cleanLoop(cfg.CleanInterval)
	if cfg.CompactInterval >= 0 {
		if cfg.CompactInterval == 0 {
			cfg.CompactInterval = DefaultCompactInterval
		}
		s.wg.Add(1)
		go s.compactLoop(max(cfg.CompactInterval, 3*cfg.CleanInterval))
	}
	return s, nil
}

// Close stops the cleaner, fires pending watches and, when Open dialled
// the client, closes it. It returns once every goroutine the store
// started has returned.
func (s *Store) Close() error {
	s.goMu.Lock()
	s.cancel()
	s.goMu.Unlock()
	s.wg.Wait()
	s.leaseMu.Lock()
	if s.leaseOK {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s.cli.Revoke(ctx, s.lease)
		cancel()
		s.leaseOK = false
	}
	s.leaseMu.Unlock()
	if s.ownClient {
		return s.cli.Close()
	}
	return nil
}

func (s *Store) closed() bool { return s.ctx.Err() != nil }

// goBackground runs fn on a goroutine Close waits for, or reports false
// when Close has begun (fn then does not run).
func (s *Store) goBackground(fn func()) bool {
	s.goMu.Lock()
	defer s.goMu.Unlock()
	if s.closed() {
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		fn()
	}()
	return true
}

// View runs fn on a snapshot at one revision. It retries when the revision
// is compacted while fn reads.
func (s *Store) View(ctx context.Context, fn func(kv.ReadTx) error) error {
	return s.retry(ctx, func(t *tx) error {
		if err := fn(t); err != nil {
			return err
		}
		return t.err
	})
}

// Update implements kv.Store.
func (s *Store) Update(ctx context.Context, fn func(kv.Tx) error) error {
	return s.retry(ctx, func(t *tx) error {
		if err := fn(t); err != nil {
			return err
		}
		if t.err != nil {
			return t.err
		}
		return s.commit(ctx, t)
	})
}

const maxRetries = 1000

// maxStampRetries bounds the retries at the same read revision after
// errStampTaken, so a transaction whose data did change too goes on to a
// fresh revision.
const maxStampRetries = 3

// retry runs attempt on fresh transactions until it returns something
// other than a conflict (or maxRetries conflicts), backing off in between.
// A commit that lost only its versionstamp is retried at once at the same
// read revision, reusing what it read: running it again at that revision
// is as valid as at a newer one (the commit checks every read against the
// revision it was made at), and costs a commit instead of a transaction.
func (s *Store) retry(ctx context.Context, attempt func(*tx) error) error {
	var last *tx
	stamp, slow := 0, 0
	for n := 0; ; n++ {
		if s.closed() {
			return kv.ErrClosed
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		t := s.newTx(ctx)
		t.slow = slow
		if last != nil {
			t.rev, t.seen = last.rev, last.seen
			last = nil
		}
		err := attempt(t)
		slow = t.slow
		if errors.Is(err, errStampTaken) && stamp < maxStampRetries && n < maxRetries {
			stamp++
			last = t
			continue
		}
		if errors.Is(err, kv.ErrConflict) && n < maxRetries {
			backoff(ctx, n)
			continue
		}
		return err
	}
}

// backoff sleeps a short, growing, jittered time so that transactions
// that keep conflicting do not retry in lock step.
func backoff(ctx context.Context, attempt int) {
	max := time.Millisecond << min(attempt, 6)
	d := time.Duration(mrand.Int64N(int64(max)) + 1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Watch implements kv.Store.
func (s *Store) Watch(ctx context.Context, key []byte) (<-chan struct{}, error) {
	if s.closed() {
		return nil, kv.ErrClosed
	}
	k := string(s.dataPrefix) + string(key)
	var resp *clientv3.GetResponse
	err := s.send(ctx, func(ctx context.Context) (err error) {
		resp, err = s.cli.Get(ctx, k, clientv3.WithKeysOnly())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("kv/etcd: watch %q: %w", key, err)
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	wch := s.cli.Watch(wctx, k, clientv3.WithRev(resp.Header.Revision+1))
	out := make(chan struct{})
	started := s.goBackground(func() {
		defer close(out)
		defer cancel()
		select {
		case <-wch: // an event, or the watch ended (compaction, lost leader): fire
		case <-ctx.Done():
		case <-s.ctx.Done():
		}
	})
	if !started {
		cancel()
		return nil, kv.ErrClosed
	}
	return out, nil
}

// leaseID returns the lease commit markers are attached to: the current
// one while it is younger than leaseTTL/2 and alive, else a new one (the
// old one then expires leaseTTL after its last keepalive).
func (s *Store) leaseID(ctx context.Context) (clientv3.LeaseID, error) {
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	if s.leaseOK && time.Since(s.leaseAt) < time.Duration(s.leaseTTL)*time.Second/2 {
		return s.lease, nil
	}
	// A lease granted twice (an attempt's answer lost) costs an unused
	// lease that expires.
	var g *clientv3.LeaseGrantResponse
	err := s.send(ctx, func(ctx context.Context) (err error) {
		g, err = s.cli.Grant(ctx, s.leaseTTL)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("kv/etcd: grant lease: %w", err)
	}
	kctx, stop := context.WithCancel(s.ctx)
	ka, err := s.cli.KeepAlive(kctx, g.ID)
	if err != nil {
		stop()
		return 0, fmt.Errorf("kv/etcd: keep lease alive: %w", err)
	}
	id := g.ID
	// The keepalive channel closes when kctx ends (a newer lease, or
	// Close) or the lease is lost.
	started := s.goBackground(func() {
		for range ka {
		}
		s.leaseMu.Lock()
		if s.lease == id {
			s.leaseOK = false
		}
		s.leaseMu.Unlock()
		if kctx.Err() == nil {
			s.log.Warn("etcd lease for commit markers lost; granting a new one", "lease", int64(id))
		}
	})
	if !started {
		stop()
		return 0, kv.ErrClosed
	}
	if s.leaseStop != nil {
		s.leaseStop()
	}
	s.lease, s.leaseOK, s.leaseAt, s.leaseStop = g.ID, true, time.Now(), stop
	return g.ID, nil
}

func (s *Store) dropLease(id clientv3.LeaseID) {
	s.leaseMu.Lock()
	if s.lease == id {
		s.leaseOK = false
	}
	s.leaseMu.Unlock()
}

func newMarkerID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// revBytes encodes an etcd revision so that byte order is numeric order
// (etcd compares values as bytes).
func revBytes(rev int64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(rev))
	return b[:]
}

var _ kv.Store = (*Store)(nil)
var _ kv.SnapshotTx = (*tx)(nil)

// tlsConfig builds the client TLS configuration from Config's PEM files,
// or returns nil when none is set.
func tlsConfig(cfg Config) (*tls.Config, error) {
	if cfg.CertFile == "" && cfg.KeyFile == "" && cfg.CAFile == "" {
		return nil, nil
	}
	info := transport.TLSInfo{CertFile: cfg.CertFile, KeyFile: cfg.KeyFile, TrustedCAFile: cfg.CAFile}
	c, err := info.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kv/etcd: TLS: %w", err)
	}
	return c, nil
}
