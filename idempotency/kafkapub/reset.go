package kafkapub

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/idempotency"
)

// DefaultResetAfter is Options.ResetAfter's default. It is a handful, not
// one: a broker killed or a leader moved fails the publishes in flight at
// that moment, which kafka-go's own metadata refresh (every few seconds)
// survives; a longer streak means its cached connections, metadata or
// batch queues are not coming back.
const DefaultResetAfter = 8

// errRetired is what a replaced generation's transport answers every new
// dial with, so that its Writers give up the batches still queued instead
// of sending them one attempt and one timeout at a time.
var errRetired = errors.New("kafkapub: writer replaced after repeated failures; not sent")

// errPublisherClosed is Publish's error after Close: nothing was sent.
var errPublisherClosed = errors.New("kafkapub: publish after Close")

// acquire returns the current generation, held for reading (the caller
// releases g.use), or nil once the Publisher is closed.
func (p *Publisher) acquire() *writers {
	for {
		g := p.cur.Load()
		if !g.closing.Load() {
			g.use.RLock()
			if !g.closing.Load() {
				return g
			}
			g.use.RUnlock()
		}
		if p.cur.Load() == g {
			return nil // closing and still current: Close was called
		}
	}
}

// writers is one generation of the Publisher's kafka-go clients: the two
// Writers and the Transport they share, replaced together by a reset.
type writers struct {
	small *kafka.Writer // shared batches of records that fit uncompressed
	large *kafka.Writer // a record alone in its batch, compressed
	// transport is a copy of Options.Transport (see cloneTransport), of
	// this generation alone.
	transport *kafka.Transport
	retired   atomic.Bool // set when replaced: transport dials no more
	// closing is set before the Writers are closed; use is held for
	// reading by every Publish writing through them, and for writing
	// while they are closed: kafka-go's Writer.Close racing a
	// WriteMessages can leave a partition goroutine that never ends (and
	// Close waiting for it).
	closing atomic.Bool
	use     sync.RWMutex
	// streak counts Publishes in a row that ended with an unknown outcome
	// or a stale-metadata refusal (see sick).
	streak atomic.Int64
}

// newWriters returns a fresh generation: new Writers over a new copy of
// the template transport, with no connection, metadata or batch yet.
func (p *Publisher) newWriters() *writers {
	g := &writers{}
	g.transport = cloneTransport(p.transport, &g.retired)
	writer := func(batchSize int, batchBytes int64, c kafka.Compression) *kafka.Writer {
		return &kafka.Writer{
			Addr:     kafka.TCP(p.brokers...),
			Topic:    p.topic,
			Balancer: p.opts.Balancer,
			// acks=all, explicitly: the zero value is acks=none, which
			// reports no error at all when the broker loses the message.
			RequiredAcks: kafka.RequireAll,
			Async:        false,
			BatchTimeout: p.opts.BatchTimeout,
			BatchSize:    batchSize,
			BatchBytes:   batchBytes,
			Compression:  c,
			MaxAttempts:  p.opts.MaxAttempts,
			WriteTimeout: p.opts.WriteTimeout,
			Transport:    g.transport,
		}
	}
	g.small = writer(0, int64(p.limits.batchBytes), p.codecs[0])
	// One record per batch, so the broker measures it alone.
	g.large = writer(1, 1<<62, p.codecs[1])
	return g
}

// cloneTransport copies t's configuration into a Transport of its own (a
// kafka.Transport holds a mutex and its pools: it is not copied by value),
// whose dials fail with errRetired once retired is set.
func cloneTransport(t *kafka.Transport, retired *atomic.Bool) *kafka.Transport {
	dial := t.Dial
	if dial == nil {
		// kafka-go's own default dialer.
		dial = (&net.Dialer{Timeout: 3 * time.Second}).DialContext
	}
	return &kafka.Transport{
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if retired.Load() {
				return nil, errRetired
			}
			return dial(ctx, network, addr)
		},
		DialTimeout:    t.DialTimeout,
		IdleTimeout:    t.IdleTimeout,
		MetadataTTL:    t.MetadataTTL,
		MetadataTopics: t.MetadataTopics,
		ClientID:       t.ClientID,
		TLS:            t.TLS,
		SASL:           t.SASL,
		Resolver:       t.Resolver,
		Context:        t.Context,
	}
}

// close closes the Writers, which wait for their batches in flight, then
// the transport's connections and its metadata goroutines.
func (g *writers) close() error {
	err := errors.Join(g.small.Close(), g.large.Close())
	g.transport.CloseIdleConnections()
	return err
}

// retire closes a replaced generation. Its transport first stops dialing,
// and its pools are dropped, so the batches still queued (whose Publishes
// mostly gave up already) fail at once instead of each waiting out a
// timeout; a produce request already on the wire still gets its answer.
func (g *writers) retire() {
	g.retired.Store(true)
	g.closing.Store(true)
	g.transport.CloseIdleConnections()
	g.use.Lock() // the Publishes still writing through g end first
	defer g.use.Unlock()
	_ = g.close() // kafka-go's Writer.Close returns nil
}

// sick reports whether a Publish error hints at the writer's own state
// (its connections, its cached metadata, its queues) rather than at the
// cluster: an unknown outcome that no broker answered (a timeout, a broken
// connection), or a refusal that says the writer asked the wrong broker.
// A broker's other answers (NotEnoughReplicas among them) show the writer
// reaches the right leader.
func sick(err error) bool {
	var rej *idempotency.RejectError
	if errors.As(err, &rej) {
		return false
	}
	var ke kafka.Error
	if errors.As(err, &ke) {
		return staleMetadata(ke)
	}
	return IsOutcomeUnknown(err)
}

// healthy reports whether a Publish result shows the writer reaching the
// partition's leader: a success, or a broker's answer other than stale
// metadata.
func healthy(err error) bool {
	if err == nil {
		return true
	}
	var ke kafka.Error
	return errors.As(err, &ke) && !staleMetadata(ke)
}

// staleMetadata reports whether a broker's refusal means the producer's
// view of the partition's leader is out of date.
func staleMetadata(e kafka.Error) bool {
	switch e {
	case kafka.UnknownTopicOrPartition, kafka.LeaderNotAvailable, kafka.NotLeaderForPartition,
		kafka.BrokerNotAvailable, kafka.ReplicaNotAvailable, kafka.FencedLeaderEpoch, kafka.UnknownLeaderEpoch:
		return true
	}
	return false
}

// observe counts a Publish's result against the generation g it used, and
// resets the Publisher when g's streak of sick results reaches
// Options.ResetAfter.
func (p *Publisher) observe(ctx context.Context, g *writers, err error) {
	switch {
	case healthy(err):
		g.streak.Store(0)
	case sick(err):
		if n := g.streak.Add(1); p.opts.ResetAfter > 0 && n >= int64(p.opts.ResetAfter) {
			p.reset(ctx, g, n, err)
		}
	}
}

// reset replaces generation g, if it is still the current one, with a
// fresh one, and retires g in the background (Close waits for it). Resets
// are at least WriteTimeout apart: a fresh writer's first publishes may
// take that long to be answered, and an outage of the cluster itself must
// not turn into a reset per handful of publishes.
func (p *Publisher) reset(ctx context.Context, g *writers, streak int64, cause error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.opts.Now()
	if p.closed || p.cur.Load() != g || now.Sub(p.lastReset) < p.opts.WriteTimeout {
		return
	}
	p.lastReset = now
	p.resets++
	p.cur.Store(p.newWriters())
	p.retiring.Add(1)
	go func() {
		defer p.retiring.Done()
		g.retire()
	}()
	p.inst.resets.Add(ctx, 1)
	p.opts.Logger.LogAttrs(ctx, slog.LevelWarn,
		"kafkapub: replacing the writer and its transport: publishes in a row ended with an unknown outcome or stale metadata",
		slog.String("topic", p.topic), slog.Int64("streak", streak), slog.Int("reset", p.resets),
		slog.Any("error", cause))
}
