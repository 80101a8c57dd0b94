package kafkawire

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/saslauthenticate"
	"github.com/segmentio/kafka-go/protocol/saslhandshake"
	"github.com/segmentio/kafka-go/sasl"
)

// Dial opens a connection to addr the way d says, as kafka-go's Dialer
// does: the host through d.Resolver if set, the socket through d.DialFunc
// (else a net.Dialer with d's settings), TLS with d.TLS (ServerName, when
// unset, from the host dialed), then SASL with d.SASLMechanism. d.Timeout
// and d.Deadline bound the whole of it.
func Dial(ctx context.Context, d *kafka.Dialer, clientID, addr string) (net.Conn, error) {
	if d.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.Timeout)
		defer cancel()
	}
	if !d.Deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Deadline)
		defer cancel()
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("kafkawire: broker address %q: %w", addr, err)
	}
	if d.Resolver != nil {
		// kafka-go's rule: the resolved host wins, the given port unless
		// it is empty.
		hosts, err := d.Resolver.LookupHost(ctx, host)
		if err != nil {
			return nil, fmt.Errorf("kafkawire: resolve %s: %w", host, err)
		}
		if len(hosts) > 0 {
			rh, rp, err := net.SplitHostPort(hosts[0])
			if err != nil {
				rh, rp = hosts[0], ""
			}
			host = rh
			if port == "" {
				port = rp
			}
		}
	}
	addr = net.JoinHostPort(host, port)
	dial := d.DialFunc
	if dial == nil {
		dial = (&net.Dialer{LocalAddr: d.LocalAddr, FallbackDelay: d.FallbackDelay, KeepAlive: d.KeepAlive}).DialContext
	}
	conn, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("kafkawire: dial %s: %w", addr, err)
	}
	if d.TLS != nil {
		cfg := d.TLS
		if cfg.ServerName == "" {
			cfg = cfg.Clone()
			cfg.ServerName = host
		}
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = tc.Close()
			return nil, fmt.Errorf("kafkawire: TLS handshake with %s: %w", addr, err)
		}
		conn = tc
	}
	if d.SASLMechanism != nil {
		p, _ := strconv.Atoi(port)
		sctx := sasl.WithMetadata(ctx, &sasl.Metadata{Host: host, Port: p})
		if err := authenticate(sctx, conn, d.SASLMechanism, clientID); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("kafkawire: SASL %s with %s: %w", d.SASLMechanism.Name(), addr, err)
		}
	}
	return conn, nil
}

// authenticate runs SaslHandshake v1, then SaslAuthenticate v0 for every
// step of mech, as kafka-go's Dialer does. The connection's deadline
// follows ctx meanwhile.
func authenticate(ctx context.Context, conn net.Conn, mech sasl.Mechanism, clientID string) error {
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
		defer func() { _ = conn.SetDeadline(time.Time{}) }()
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	res, err := protocol.RoundTrip(conn, 1, 1, clientID, &saslhandshake.Request{Mechanism: mech.Name()})
	if err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	if hr, ok := res.(*saslhandshake.Response); !ok {
		return fmt.Errorf("handshake: %w: unexpected response", ErrMalformed)
	} else if hr.ErrorCode != 0 {
		return fmt.Errorf("handshake (broker offers %v): %w", hr.Mechanisms, kafka.Error(hr.ErrorCode))
	}
	sess, state, err := mech.Start(ctx)
	if err != nil {
		return err
	}
	for corr, done := int32(2), false; !done; corr++ {
		res, err := protocol.RoundTrip(conn, 0, corr, clientID, &saslauthenticate.Request{AuthBytes: state})
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			// A broker may say no by closing the connection.
			return kafka.SASLAuthenticationFailed
		}
		if err != nil {
			return err
		}
		ar, ok := res.(*saslauthenticate.Response)
		if !ok {
			return fmt.Errorf("authenticate: %w: unexpected response", ErrMalformed)
		}
		if ar.ErrorCode != 0 {
			return fmt.Errorf("%w: %s", kafka.Error(ar.ErrorCode), ar.ErrorMessage)
		}
		if done, state, err = sess.Next(ctx, ar.AuthBytes); err != nil {
			return err
		}
	}
	return nil
}

// TransportDialer returns a Dialer that connects the way tr does: its TLS,
// SASL, Dial function, dial timeout, client id and broker resolver. A nil
// tr is kafka-go's defaults. The module's own connections (fetchers, group
// members) dial through a Dialer; users configure kafka-go's Transport.
func TransportDialer(tr *kafka.Transport) *kafka.Dialer {
	d := &kafka.Dialer{Timeout: 10 * time.Second}
	if tr == nil {
		return d
	}
	d.TLS, d.SASLMechanism, d.ClientID, d.DialFunc = tr.TLS, tr.SASL, tr.ClientID, tr.Dial
	if tr.DialTimeout > 0 {
		d.Timeout = tr.DialTimeout
	}
	if tr.Resolver != nil {
		d.Resolver = brokerResolver{tr.Resolver}
	}
	return d
}

// brokerResolver is a Transport's BrokerResolver as a Dialer's Resolver.
type brokerResolver struct{ r kafka.BrokerResolver }

func (b brokerResolver) LookupHost(ctx context.Context, host string) ([]string, error) {
	ips, err := b.r.LookupBrokerIPAddr(ctx, kafka.Broker{Host: host})
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		out = append(out, ip.String())
	}
	return out, nil
}
