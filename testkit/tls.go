package testkit

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"testing"
	"time"
)

// TLS returns a server and a client TLS configuration for loopback
// servers: a fresh self-signed certificate for 127.0.0.1, ::1 and
// localhost, which the client configuration trusts (and nothing else). Use
// them to test TLS connections to servers the kit starts, such as Kafka:
//
//	server, client := testkit.TLS(t)
//	// ApacheKafkaOptions{TLS: server} (or kfake.TLS(server)) for the broker;
//	// kafka.Dialer{TLS: client} for the clients
func TLS(t testing.TB) (server, client *tls.Config) {
	t.Helper()
	return TLSFor(t, "127.0.0.1", "::1", "localhost")
}

// TLSFor is TLS with a certificate for hosts only (IP addresses and DNS
// names): a client that connects to any other name or address fails its
// handshake, as with a certificate issued for another server.
func TLSFor(t testing.TB, hosts ...string) (server, client *tls.Config) {
	t.Helper()
	var ips []net.IP
	var names []string
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
		} else {
			names = append(names, h)
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("testkit: tls key: %v", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "testkit"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           ips,
		DNSNames:              names,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("testkit: tls certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("testkit: tls certificate: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	server = &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}},
		MinVersion:   tls.VersionTLS12,
	}
	client = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return server, client
}

// certificatePEM returns cfg's first certificate as PEM: its chain, and its
// private key in PKCS#8, as Kafka's PEM keystore reads them.
func certificatePEM(cfg *tls.Config) (chain, key []byte, err error) {
	if len(cfg.Certificates) == 0 || len(cfg.Certificates[0].Certificate) == 0 {
		return nil, nil, errors.New("no certificate")
	}
	c := cfg.Certificates[0]
	for _, der := range c.Certificate {
		chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	der, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		return nil, nil, err
	}
	return chain, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}
