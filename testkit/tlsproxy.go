package testkit

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
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
	p := &tlsProxy{ln: ln, backend: backend}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return ln.Addr().String()
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

type tlsProxy struct {
	ln      net.Listener
	backend string
	wg      sync.WaitGroup
	proxyConns
}

func (p *tlsProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		if !p.track(c) {
			_ = c.Close()
			return
		}
		p.wg.Go(func() { p.serve(c.(*tls.Conn)) })
	}
}

// serve completes the handshake first, so a client the proxy's
// certificate does not satisfy gets no connection to the backend.
func (p *tlsProxy) serve(c *tls.Conn) {
	defer p.untrack(c)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
	err := c.HandshakeContext(ctx)
	cancel()
	if err != nil {
		return
	}
	var d net.Dialer
	b, err := d.Dial("tcp", p.backend)
	if err != nil {
		return
	}
	if !p.track(b) {
		_ = b.Close()
		return
	}
	defer p.untrack(b)
	defer b.Close()
	// Either side ending ends both, as a terminator does: the other copy
	// then returns on its closed connection.
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(b, c)
	go pipe(c, b)
	<-done
	_ = c.Close()
	_ = b.Close()
	<-done
}

func (p *tlsProxy) close() {
	p.closeAll(p.ln)
	p.wg.Wait()
}
