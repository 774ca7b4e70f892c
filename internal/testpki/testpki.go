// Package testpki makes TLS key material for tests: a root CA, an
// intermediate, a server certificate for 127.0.0.1 and a client
// certificate, generated per test and written to its temporary directory,
// so no key is ever committed.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// PKI is key material made for one test (never committed): a root CA,
// an intermediate CA and a server certificate for 127.0.0.1 under it, and
// a client CA with one client certificate, written as PEM files in a
// temporary directory.
type PKI struct {
	CAFile         string          // the root CA (ssl_trusted_certificates_file)
	Server         tls.Certificate // leaf + intermediate
	ClientCAs      *x509.CertPool  // what a server requiring client certs trusts
	ClientCertFile string
	ClientKeyFile  string
	// ClientEncKeyFile is ClientKeyFile encrypted (legacy PEM, AES-256) with ClientKeyPassword.
	ClientEncKeyFile  string
	ClientKeyPassword string
}

// New makes a PKI in t.TempDir().
func New(t testing.TB) *PKI {
	t.Helper()
	dir := t.TempDir()
	p := &PKI{ClientKeyPassword: "correct horse"}
	root, rootKey := pkiCert(t, "test root", true, nil, nil)
	inter, interKey := pkiCert(t, "test intermediate", true, root, rootKey)
	leaf, leafKey := pkiCert(t, "127.0.0.1", false, inter, interKey)
	p.Server = tls.Certificate{Certificate: [][]byte{leaf.Raw, inter.Raw}, PrivateKey: leafKey}
	p.CAFile = pkiWrite(t, dir, "ca.pem", "CERTIFICATE", root.Raw)

	clientCA, clientCAKey := pkiCert(t, "test client CA", true, nil, nil)
	p.ClientCAs = x509.NewCertPool()
	p.ClientCAs.AddCert(clientCA)
	client, clientKey := pkiCert(t, "replicator", false, clientCA, clientCAKey)
	p.ClientCertFile = pkiWrite(t, dir, "client.pem", "CERTIFICATE", client.Raw)
	keyDER, err := x509.MarshalECPrivateKey(clientKey)
	if err != nil {
		t.Fatal(err)
	}
	p.ClientKeyFile = pkiWrite(t, dir, "client.key", "EC PRIVATE KEY", keyDER)
	//lint:ignore SA1019 legacy PEM encryption is what `password` decrypts
	enc, err := x509.EncryptPEMBlock(rand.Reader, "EC PRIVATE KEY", keyDER, []byte(p.ClientKeyPassword), x509.PEMCipherAES256)
	if err != nil {
		t.Fatal(err)
	}
	p.ClientEncKeyFile = filepath.Join(dir, "client-enc.key")
	if err := os.WriteFile(p.ClientEncKeyFile, pem.EncodeToMemory(enc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// pkiCert makes a certificate signed by parent (self-signed when parent is nil).
func pkiCert(t testing.TB, name string, ca bool, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if ca {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
		tmpl.ExtKeyUsage = nil
	} else if ip := net.ParseIP(name); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// pkiWrite writes one PEM block to dir/name and returns the path.
func pkiWrite(t testing.TB, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
