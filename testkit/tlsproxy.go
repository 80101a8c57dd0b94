package testkit

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/netfail"
)

// TLSProxy puts a TLS terminator in front of a plaintext server, as a load
// balancer or stunnel does in front of ClickHouse: it listens on a loopback
// port with server (from TLS, say), completes each client's handshake and
// then copies bytes both ways between the client and a connection of its
// own to backend. A client that does not trust server's certificate fails
// its handshake, and the backend never sees it. The proxy is closed at
// cleanup, which closes every connection and waits for its goroutines.
//
// It exists because clickhouse-local, the kit's ClickHouse, cannot listen
// with TLS (SYSTEM START LISTEN accepts only TCP and HTTP there):
//
//	server, client := testkit.TLS(t)
//	addr := testkit.TLSProxy(t, chAddr, server)
//	// ch.Options{Address: addr, TLS: client}
func TLSProxy(t testing.TB, backend string, server *tls.Config) (addr string) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", server)
	if err != nil {
		t.Fatalf("testkit: tls proxy: %v", err)
	}
	p, err := netfail.NewProxy(backend, netfail.ProxyOptions{Listener: ln, Accept: handshake})
	if err != nil {
		t.Fatalf("testkit: tls proxy: %v", err)
	}
	t.Cleanup(p.Close)
	return p.Addr()
}

// WriteCA writes the certificate of server (as TLS returns it, its own CA)
// to a PEM file in a temporary directory of the test and returns the path:
// the CA file a program's flag such as -clickhouse-ca reads.
func WriteCA(t testing.TB, server *tls.Config) string {
	t.Helper()
	if len(server.Certificates) == 0 || len(server.Certificates[0].Certificate) == 0 {
		t.Fatalf("testkit: WriteCA: the configuration has no certificate")
	}
	path := filepath.Join(t.TempDir(), "ca.pem")
	block := &pem.Block{Type: "CERTIFICATE", Bytes: server.Certificates[0].Certificate[0]}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o644); err != nil {
		t.Fatalf("testkit: WriteCA: %v", err)
	}
	return path
}

// handshakeTimeout bounds a client's TLS handshake with the proxy.
const handshakeTimeout = 10 * time.Second

// handshake completes the client's handshake before the backend is dialled,
// so a client the proxy's certificate does not satisfy gets no connection
// to the backend.
func handshake(c net.Conn) bool {
	ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
	defer cancel()
	return c.(*tls.Conn).HandshakeContext(ctx) == nil
}
