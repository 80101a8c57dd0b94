package kafkawire

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// resolverFunc is a kafka.Resolver.
type resolverFunc func(ctx context.Context, host string) ([]string, error)

func (f resolverFunc) LookupHost(ctx context.Context, host string) ([]string, error) {
	return f(ctx, host)
}

// TestDialUsesResolver: a broker name only the Dialer's Resolver knows is
// reached through it, with the given port, as kafka-go's Dialer does; and
// a DialFunc, when set, makes the connection.
func TestDialUsesResolver(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan struct{}, 2)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			_ = c.Close()
		}
	}()
	_, port, err := net.SplitHostPort(ln.Addr().String())
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	var asked []string
	d := &kafka.Dialer{Timeout: 5 * time.Second, Resolver: resolverFunc(func(_ context.Context, host string) ([]string, error) {
		asked = append(asked, host)
		return []string{"127.0.0.1"}, nil
	})}
	c, err := Dial(ctx, d, "test", net.JoinHostPort("broker.invalid", port))
	require.NoError(t, err)
	_ = c.Close()
	<-accepted
	assert.Equal(t, []string{"broker.invalid"}, asked)

	var dialed []string
	d.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dialed = append(dialed, addr)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	c, err = Dial(ctx, d, "test", net.JoinHostPort("broker.invalid", port))
	require.NoError(t, err)
	_ = c.Close()
	<-accepted
	assert.Equal(t, []string{net.JoinHostPort("127.0.0.1", port)}, dialed)

	d.Resolver = nil
	_, err = Dial(ctx, d, "test", "no-port")
	assert.Error(t, err, "an address without a port")
}
