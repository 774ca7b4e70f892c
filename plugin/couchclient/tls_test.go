package couchclient

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/couchepi/couchepi/internal/testpki"
	"github.com/couchepi/couchepi/parse"
)

// tlsServer is an https server answering {"ok":true}, with cfg's certificates and client auth.
func tlsServer(t testing.TB, cfg *tls.Config) *httptest.Server {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"ok":true}`))
	}))
	srv.TLS = cfg
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are expected
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// get sends one GET without retries through pool and reports the failure, if any.
func get(pool *Pool, url string) error {
	c := pool.Endpoint(parse.Endpoint{URL: url + "/db/"}, &parse.Rep{RetriesPerRequest: 0})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Do(ctx, &Request{Method: "GET", Buffer: true})
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return errors.New(resp.Status)
	}
	return nil
}

// TestPoolTLS: the `[replicator]` TLS keys against a server with an
// intermediate CA and one that requires a client certificate.
func TestPoolTLS(t *testing.T) {
	pki := testpki.New(t)
	plain := tlsServer(t, &tls.Config{Certificates: []tls.Certificate{pki.Server}})
	mutual := tlsServer(t, &tls.Config{Certificates: []tls.Certificate{pki.Server},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pki.ClientCAs})
	depth := func(n int) *int { return &n }
	cases := []struct {
		name   string
		server *httptest.Server
		set    func(o *parse.Options)
		wantOK bool
	}{
		{"verification on by default: without the CA it fails", plain, func(o *parse.Options) {}, false},
		{"verify_ssl_certificates false (CouchDB's default)", plain, func(o *parse.Options) { o.VerifySSLCertificates = false }, true},
		{"verification with ssl_trusted_certificates_file", plain, func(o *parse.Options) {
			o.VerifySSLCertificates, o.SSLTrustedCertificatesFile = true, pki.CAFile
		}, true},
		{"one intermediate within depth 1", plain, func(o *parse.Options) {
			o.VerifySSLCertificates, o.SSLTrustedCertificatesFile, o.SSLCertificateMaxDepth = true, pki.CAFile, depth(1)
		}, true},
		{"one intermediate beyond depth 0", plain, func(o *parse.Options) {
			o.VerifySSLCertificates, o.SSLTrustedCertificatesFile, o.SSLCertificateMaxDepth = true, pki.CAFile, depth(0)
		}, false},
		{"client certificate required, none given", mutual, func(o *parse.Options) {}, false},
		{"client certificate from cert_file and key_file", mutual, func(o *parse.Options) {
			o.SSLTrustedCertificatesFile = pki.CAFile
			o.CertFile, o.KeyFile = pki.ClientCertFile, pki.ClientKeyFile
		}, true},
		{"encrypted key_file with password", mutual, func(o *parse.Options) {
			o.SSLTrustedCertificatesFile = pki.CAFile
			o.CertFile, o.KeyFile, o.Password = pki.ClientCertFile, pki.ClientEncKeyFile, pki.ClientKeyPassword
		}, true},
		{"verified and with a client certificate", mutual, func(o *parse.Options) {
			o.VerifySSLCertificates, o.SSLTrustedCertificatesFile = true, pki.CAFile
			o.CertFile, o.KeyFile = pki.ClientCertFile, pki.ClientKeyFile
		}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := parse.DefaultOptions()
			tc.set(&o)
			pool := testPool()
			defer pool.Close()
			if err := pool.Configure(o); err != nil {
				t.Fatalf("Configure: %v", err)
			}
			err := get(pool, tc.server.URL)
			if tc.wantOK && err != nil {
				t.Fatalf("request failed: %v", err)
			}
			if !tc.wantOK && err == nil {
				t.Fatal("request succeeded")
			}
		})
	}
}

// TestConfigureSwitchesTLS: a config change reaches a pool in use: the
// connections opened after it follow the new TLS keys, also for a client
// made before the change.
func TestConfigureSwitchesTLS(t *testing.T) {
	pki := testpki.New(t)
	srv := tlsServer(t, &tls.Config{Certificates: []tls.Certificate{pki.Server}})
	pool := testPool()
	defer pool.Close()
	c := pool.Endpoint(parse.Endpoint{URL: srv.URL + "/db/"}, &parse.Rep{RetriesPerRequest: 0})
	do := func() error {
		resp, err := c.Do(context.Background(), &Request{Method: "GET", Buffer: true})
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	o := parse.DefaultOptions()
	steps := []struct {
		name   string
		set    func()
		wantOK bool
	}{
		{"defaults: verified, no CA", func() {}, false},
		{"CA file added", func() { o.SSLTrustedCertificatesFile = pki.CAFile }, true},
		{"CA file removed again", func() { o.SSLTrustedCertificatesFile = "" }, false},
		{"verification off", func() { o.VerifySSLCertificates = false }, true},
	}
	for _, st := range steps {
		st.set()
		if err := pool.Configure(o); err != nil {
			t.Fatalf("%s: Configure: %v", st.name, err)
		}
		if err := do(); (err == nil) != st.wantOK {
			t.Fatalf("%s: err = %v, want ok %v", st.name, err, st.wantOK)
		}
	}
}

// TestTLSConfigErrors: unusable TLS files are reported (never with the
// password) and leave the key at its default.
func TestTLSConfigErrors(t *testing.T) {
	pki := testpki.New(t)
	dir := t.TempDir()
	pkcs8 := filepath.Join(dir, "pkcs8.key")
	os.WriteFile(pkcs8, []byte("-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n"), 0o600)
	notPEM := filepath.Join(dir, "not.pem")
	os.WriteFile(notPEM, []byte("hello"), 0o600)
	cases := []struct {
		name string
		set  func(o *parse.Options)
		want string
	}{
		{"wrong password", func(o *parse.Options) {
			o.CertFile, o.KeyFile, o.Password = pki.ClientCertFile, pki.ClientEncKeyFile, "wrong horse"
		}, "could not be decrypted with `password`"},
		{"encrypted key without password", func(o *parse.Options) {
			o.CertFile, o.KeyFile = pki.ClientCertFile, pki.ClientEncKeyFile
		}, "is encrypted and `password` is not set"},
		{"encrypted PKCS#8 key", func(o *parse.Options) {
			o.CertFile, o.KeyFile, o.Password = pki.ClientCertFile, pkcs8, "wrong horse"
		}, "encrypted PKCS#8 key, which is not supported"},
		{"missing cert_file", func(o *parse.Options) {
			o.CertFile, o.KeyFile = filepath.Join(dir, "nope.pem"), pki.ClientKeyFile
		}, "[replicator] cert_file"},
		{"CA file without certificates", func(o *parse.Options) {
			o.VerifySSLCertificates, o.SSLTrustedCertificatesFile = true, notPEM
		}, "holds no PEM certificate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := parse.DefaultOptions()
			tc.set(&o)
			cfg, err := tlsConfig(nil, o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "horse") {
				t.Errorf("error holds the password: %v", err)
			}
			if len(cfg.Certificates) != 0 || cfg.RootCAs != nil {
				t.Errorf("a failed key did not keep its default: %d certificates, roots %v", len(cfg.Certificates), cfg.RootCAs != nil)
			}
		})
	}
}

// TestRequestTimeout: request_timeout cuts a slow request, which is then
// retried; a Feed request is left alone.
func TestRequestTimeout(t *testing.T) {
	cases := []struct {
		name      string
		timeoutMS int
		feed      bool
		retries   int
		wantCalls int32
		wantErr   error
	}{
		{"slow request retried", 100, false, 5, 2, nil},
		{"no request_timeout", 0, false, 5, 1, nil},
		{"feed not cut", 100, true, 5, 1, nil},
		{"no retries left", 100, false, 0, 1, ErrRequestTimeout},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) == 1 {
					select {
					case <-time.After(600 * time.Millisecond):
					case <-r.Context().Done():
						return
					}
				}
				w.Write([]byte(`{"ok":true}`))
			}))
			defer srv.Close()
			pool := testPool()
			defer pool.Close()
			o := parse.DefaultOptions()
			o.RequestTimeout = tc.timeoutMS
			pool.Configure(o)
			c := pool.Endpoint(parse.Endpoint{URL: srv.URL + "/db/"}, &parse.Rep{RetriesPerRequest: tc.retries})
			resp, err := c.Do(context.Background(), &Request{Method: "GET", Path: "_changes", Buffer: true, Feed: tc.feed})
			if err == nil {
				resp.Body.Close()
			}
			if tc.wantErr == nil && err != nil || tc.wantErr != nil && (err == nil || !strings.Contains(err.Error(), tc.wantErr.Error())) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if n := calls.Load(); n != tc.wantCalls {
				t.Errorf("%d requests, want %d", n, tc.wantCalls)
			}
		})
	}
}

// TestCertificateErrorNotRetried: a peer certificate that fails verification
// is reported at once, as an *Error that unwraps to the TLS error, instead
// of after retries_per_request rounds of backoff.
func TestCertificateErrorNotRetried(t *testing.T) {
	pki := testpki.New(t)
	srv := tlsServer(t, &tls.Config{Certificates: []tls.Certificate{pki.Server}})
	pool := testPool()
	defer pool.Close()
	c := pool.Endpoint(parse.Endpoint{URL: srv.URL + "/db/"}, &parse.Rep{RetriesPerRequest: 5})
	_, err := c.Do(context.Background(), &Request{Method: "GET", Buffer: true})
	var certErr *tls.CertificateVerificationError
	if !errors.As(err, &certErr) {
		t.Fatalf("err = %v, want one that unwraps to *tls.CertificateVerificationError", err)
	}
	if n := pool.Stats().Retries; n != 0 {
		t.Errorf("%d retries of a certificate failure, want 0", n)
	}
}
