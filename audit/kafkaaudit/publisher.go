package kafkaaudit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/audit"
	"github.com/exactlyonce/exactlyonce/idempotency"
)

// DefaultInterval is Options.Interval's default.
const DefaultInterval = time.Second

// Options configure a Publisher. The zero value is valid.
type Options struct {
	// Bucket is the width of the buckets; it must be the processor's.
	// Default audit.DefaultBucket.
	Bucket time.Duration
	// Interval is the time between two sends in Run. Default
	// DefaultInterval. Longer sends fewer records and loses more counts to
	// a kill.
	Interval time.Duration
	// Source names this process's deltas. Default: host name, pid and
	// start time, unique per process start.
	Source string
	// Transport reaches the brokers (TLS, SASL). Default kafka-go's.
	Transport kafka.RoundTripper
	// Logger receives failed sends (retried). Default: discards.
	Logger *slog.Logger
	// Now is the clock of the default Source. Default time.Now.
	Now func() time.Time
}

// Publisher sums counts and sends them as deltas. Its methods are safe for
// concurrent use.
type Publisher struct {
	w        *kafka.Writer
	opts     Options
	mu       sync.Mutex
	pending  map[audit.Key]uint64
	unsent   []audit.Delta // numbered, not acknowledged yet
	seq      uint64
	sendMu   sync.Mutex // one send at a time, in number order
	closed   chan struct{}
	closeOne sync.Once
}

// New returns a Publisher to topic on brokers. It does not connect yet.
// Missing brokers or topic, a Bucket that is not whole seconds (the
// processor's Counter refuses it) or a negative Interval is an error
// wrapping audit.ErrInvalidOptions.
func New(brokers []string, topic string, opts Options) (*Publisher, error) {
	if len(brokers) == 0 || topic == "" {
		return nil, fmt.Errorf("%w: kafkaaudit: brokers and topic are required", audit.ErrInvalidOptions)
	}
	if opts.Bucket == 0 {
		opts.Bucket = audit.DefaultBucket
	}
	if opts.Interval == 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Bucket < time.Second || opts.Bucket%time.Second != 0 {
		return nil, fmt.Errorf("%w: kafkaaudit: Bucket %v: want whole seconds", audit.ErrInvalidOptions, opts.Bucket)
	}
	if opts.Interval < 0 {
		return nil, fmt.Errorf("%w: kafkaaudit: Interval %v is negative", audit.ErrInvalidOptions, opts.Interval)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Source == "" {
		host, _ := os.Hostname()
		opts.Source = host + "/" + strconv.Itoa(os.Getpid()) + "/" + strconv.FormatInt(opts.Now().UnixNano(), 36)
	}
	w := &kafka.Writer{
		Addr: kafka.TCP(brokers...), Topic: topic, Balancer: &kafka.Hash{},
		RequiredAcks: kafka.RequireAll, Transport: opts.Transport,
		BatchTimeout: time.Millisecond, MaxAttempts: 1,
	}
	return &Publisher{w: w, opts: opts, pending: map[audit.Key]uint64{}, closed: make(chan struct{})}, nil
}

// Add counts n events of tenant at event time at in stage.
func (p *Publisher) Add(stage, tenant string, at time.Time, n uint64) {
	p.mu.Lock()
	p.pending[audit.Key{Stage: stage, Tenant: tenant, Bucket: audit.BucketOf(at, p.opts.Bucket)}] += n
	p.mu.Unlock()
}

// Wrap returns next counting, in audit.StageAccepted, every delivery whose
// side effect succeeded: the one the gateway then answers 2xx. classify
// gives the delivery's tenant and event time (the processor's, so both
// count it in the same bucket); ok false leaves it uncounted.
func (p *Publisher) Wrap(next idempotency.Func, classify func(idempotency.Delivery) (tenant string, at time.Time, ok bool)) idempotency.Func {
	return func(ctx context.Context, d idempotency.Delivery) error {
		if err := next(ctx, d); err != nil {
			return err
		}
		if tenant, at, ok := classify(d); ok {
			p.Add(audit.StageAccepted, tenant, at, 1)
		}
		return nil
	}
}

// Flush numbers the counts summed since the last Flush and sends every
// delta not acknowledged yet. On an error the deltas stay, with their
// numbers, for the next Flush.
func (p *Publisher) Flush(ctx context.Context) error {
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	p.mu.Lock()
	for k, n := range p.pending {
		p.seq++
		p.unsent = append(p.unsent, audit.Delta{Source: p.opts.Source, Seq: p.seq, Stage: k.Stage, Tenant: k.Tenant, Bucket: k.Bucket, Count: n})
	}
	clear(p.pending)
	unsent := p.unsent
	p.mu.Unlock()
	if len(unsent) == 0 {
		return nil
	}
	msgs := make([]kafka.Message, len(unsent))
	for i, d := range unsent {
		msgs[i] = kafka.Message{Key: []byte(d.Tenant), Value: d.Encode()}
	}
	if err := p.w.WriteMessages(ctx, msgs...); err != nil {
		return fmt.Errorf("kafkaaudit: send %d deltas: %w", len(msgs), err)
	}
	p.mu.Lock()
	p.unsent = p.unsent[len(unsent):]
	p.mu.Unlock()
	return nil
}

// Run flushes every Interval until ctx ends or Close is called; a failed
// flush is logged and retried at the next one. It returns nil.
func (p *Publisher) Run(ctx context.Context) error {
	t := time.NewTicker(p.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p.closed:
			return nil
		case <-t.C:
			if err := p.Flush(ctx); err != nil && ctx.Err() == nil {
				p.opts.Logger.Warn("audit counts not sent; retrying", "err", err)
			}
		}
	}
}

// Close stops Run, sends what is left (for at most ten seconds) and closes
// the connection. Safe to call twice.
func (p *Publisher) Close() error {
	var err error
	p.closeOne.Do(func() {
		close(p.closed)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = errors.Join(p.Flush(ctx), p.w.Close())
	})
	return err
}
