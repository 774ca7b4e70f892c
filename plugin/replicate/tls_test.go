package replicate

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/couchepi/couchepi/internal/testpki"
	"github.com/couchepi/couchepi/parse"
)

// TestTLSEndpoints replicates from minicouch behind https reverse proxies
// (one with an intermediate CA, one requiring client certificates) with the
// `[replicator]` TLS keys given to the pool.
func TestTLSEndpoints(t *testing.T) {
	s := startServer(t)
	pki := testpki.New(t)
	plain := newTLSFaultProxy(t, s, &tls.Config{Certificates: []tls.Certificate{pki.Server}})
	mutual := newTLSFaultProxy(t, s, &tls.Config{Certificates: []tls.Certificate{pki.Server},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pki.ClientCAs})
	cases := []struct {
		name       string
		proxy      *faultProxy
		set        func(o *parse.Options)
		wantOK     bool
		wantReason string // part of the failure's reason
	}{
		{"verification on by default: without the CA it fails, naming the cause", plain, func(o *parse.Options) {}, false,
			"x509: certificate signed by unknown authority (see [replicator] ssl_trusted_certificates_file"},
		{"verification on with ssl_trusted_certificates_file", plain, func(o *parse.Options) {
			o.SSLTrustedCertificatesFile = pki.CAFile
		}, true, ""},
		{"verification off (CouchDB 3.x's default)", plain, func(o *parse.Options) { o.VerifySSLCertificates = false }, true, ""},
		{"client certificate required, none configured", mutual, func(o *parse.Options) {}, false, "db_not_found: could not open https://127.0.0.1:"},
		{"client certificate from cert_file and key_file", mutual, func(o *parse.Options) {
			o.VerifySSLCertificates, o.SSLTrustedCertificatesFile = true, pki.CAFile
			o.CertFile, o.KeyFile = pki.ClientCertFile, pki.ClientKeyFile
		}, true, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src, tgt := s.newDB(t, "src"), s.newDB(t, "tgt")
			addDocs(t, s, src, 0, 5)
			o := parse.DefaultOptions()
			tc.set(&o)
			rep := testRep(s, src, tgt)
			rep.Source = tc.proxy.endpointServer(s).endpoint(src)
			rep.RetriesPerRequest = 0 // a refused handshake fails at once
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := Run(ctx, rep, Options{Pool: configuredPool(t, o), ServerUUID: "0123456789abcdef0123456789abcdef"})
			if !tc.wantOK {
				if err == nil {
					t.Fatal("replication over an unacceptable TLS connection succeeded")
				}
				if tc.wantReason != "" && !strings.Contains(err.Error(), tc.wantReason) {
					t.Errorf("error %q does not name the cause %q", err, tc.wantReason)
				}
				return
			}
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if res.Stats.DocsWritten != 5 {
				t.Errorf("docs_written %d, want 5", res.Stats.DocsWritten)
			}
			if d := diffTrees(s.contents(t, src), s.contents(t, tgt), nil); len(d) > 0 {
				t.Errorf("target differs:\n%s", strings.Join(d, "\n"))
			}
		})
	}
}
