package couchclient

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/couchepi/couchepi/parse"
)

// tlsConfig builds the client TLS config of the `[replicator]` TLS keys on
// top of base (nil = Go defaults):
//
//   - verify_ssl_certificates false (CouchDB 3.x's default): peers are not verified;
//   - true (couchepi's default): peers are verified against ssl_trusted_certificates_file (or
//     the system roots when it is unset) and a verified chain may hold at most
//     ssl_certificate_max_depth intermediates (Erlang ssl's `depth`);
//   - cert_file + key_file: the client certificate, key_file decrypted with
//     `password` when it is an encrypted legacy PEM block.
//
// A key whose file cannot be used keeps its default (no CA bundle: system
// roots; no client certificate) and is reported in the returned error,
// which never holds the password.
func tlsConfig(base *tls.Config, o parse.Options) (*tls.Config, error) {
	cfg := &tls.Config{}
	if base != nil {
		cfg = base.Clone()
	}
	var errs []error
	if !o.VerifySSLCertificates {
		cfg.InsecureSkipVerify = true
	} else {
		cfg.InsecureSkipVerify = false
		if o.SSLTrustedCertificatesFile != "" {
			pool, err := loadCAFile(o.SSLTrustedCertificatesFile)
			if err != nil {
				errs = append(errs, err)
			} else {
				cfg.RootCAs = pool
			}
		}
		depth := o.CertificateMaxDepth()
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			return checkDepth(cs.VerifiedChains, depth)
		}
	}
	if o.CertFile != "" && o.KeyFile != "" {
		cert, err := loadClientCert(o.CertFile, o.KeyFile, o.Password)
		if err != nil {
			errs = append(errs, err)
		} else {
			cfg.Certificates = []tls.Certificate{cert}
		}
	}
	return cfg, errors.Join(errs...)
}

// checkDepth accepts a connection when one of its verified chains (peer
// first, trusted root last) holds at most depth intermediate certificates.
func checkDepth(chains [][]*x509.Certificate, depth int) error {
	shortest := -1
	for _, ch := range chains {
		n := max(0, len(ch)-2)
		if n <= depth {
			return nil
		}
		if shortest < 0 || n < shortest {
			shortest = n
		}
	}
	if shortest < 0 {
		return nil // not verified: nothing to measure (verification is off)
	}
	return fmt.Errorf("certificate chain has %d intermediate certificates, more than ssl_certificate_max_depth %d", shortest, depth)
}

// loadCAFile reads a PEM bundle of trusted certificates.
func loadCAFile(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("[replicator] ssl_trusted_certificates_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("[replicator] ssl_trusted_certificates_file %s holds no PEM certificate", path)
	}
	return pool, nil
}

// loadClientCert reads a PEM certificate (chain) and its private key,
// decrypting a legacy encrypted PEM key ("Proc-Type: 4,ENCRYPTED") with
// password. Encrypted PKCS#8 keys ("ENCRYPTED PRIVATE KEY") are refused:
// Go's standard library cannot decrypt them.
func loadClientCert(certFile, keyFile, password string) (tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("[replicator] cert_file: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("[replicator] key_file: %w", err)
	}
	var block *pem.Block
	for rest := keyPEM; ; {
		block, rest = pem.Decode(rest)
		if block == nil || strings.HasSuffix(block.Type, "PRIVATE KEY") {
			break
		}
	}
	switch {
	case block == nil:
		return tls.Certificate{}, fmt.Errorf("[replicator] key_file %s holds no PEM private key", keyFile)
	case block.Type == "ENCRYPTED PRIVATE KEY":
		return tls.Certificate{}, fmt.Errorf("[replicator] key_file %s is an encrypted PKCS#8 key, which is not supported: decrypt it or re-encrypt it as a traditional PEM key (openssl pkey -traditional)", keyFile)
	//lint:ignore SA1019 legacy PEM encryption is the one `password` can undo
	case x509.IsEncryptedPEMBlock(block):
		if password == "" {
			return tls.Certificate{}, fmt.Errorf("[replicator] key_file %s is encrypted and `password` is not set", keyFile)
		}
		//lint:ignore SA1019 legacy PEM encryption is the one `password` can undo
		der, err := x509.DecryptPEMBlock(block, []byte(password))
		if err == nil && !parsesAsKey(der) {
			// Legacy PEM encryption cannot always tell a wrong password
			// (about 1 in 256 pass its padding check): the bytes it gives
			// are then no key.
			err = errors.New("not a key")
		}
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("[replicator] key_file %s could not be decrypted with `password`", keyFile)
		}
		keyPEM = pem.EncodeToMemory(&pem.Block{Type: block.Type, Bytes: der})
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("[replicator] cert_file %s / key_file %s: %w", certFile, keyFile, err)
	}
	return cert, nil
}

// parsesAsKey reports whether der is a private key in one of the forms a
// PEM key file holds (PKCS#1, SEC 1, PKCS#8).
func parsesAsKey(der []byte) bool {
	if _, err := x509.ParsePKCS1PrivateKey(der); err == nil {
		return true
	}
	if _, err := x509.ParseECPrivateKey(der); err == nil {
		return true
	}
	_, err := x509.ParsePKCS8PrivateKey(der)
	return err == nil
}
