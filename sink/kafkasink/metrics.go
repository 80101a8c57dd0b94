package kafkasink

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/internal/meter"
	"github.com/exactlyonce/exactlyonce/kafkatxn"
)

// Outcomes of exactlyonce.kafkasink.transactions, one per commit of a
// prepared transaction.
const (
	outcomeCommitted = "committed" // by CheckpointCompleted
	outcomeRestored  = "restored"  // by Restore (CommitPrepared), or found committed
	outcomeAborted   = "aborted"   // found aborted by Resolve or Restore: the restore falls back to an older checkpoint
	outcomeExpired   = "expired"   // too close to TransactionTimeout to save (Expired), or aborted by it before the commit
	outcomeFailed    = "failed"    // another error; the chain restarts and its Restore commits it
)

type metrics struct {
	attrs     []attribute.KeyValue
	opt       metric.MeasurementOption // attrs
	txns      metric.Int64Counter
	records   metric.Int64Counter
	precommit metric.Float64Histogram
	commit    metric.Float64Histogram
	fenced    metric.Int64Counter
	age       *txnAge
	reg       metric.Registration
}

// txnAge is when the sink's transaction began, for the age gauge. It has
// its own lock because the sink's is held across produce requests, and a
// scrape must not wait for the network.
type txnAge struct {
	mu       sync.Mutex
	since    time.Time // zero: no transaction open
	prepared bool      // recorded by a snapshot, not committed yet
}

// Transaction states of exactlyonce.kafkasink.transaction.age.
const (
	stateOpen     = "open"
	statePrepared = "prepared"
)

// opened notes that a record is about to be sent: a transaction without a
// start gets one now, at or before the broker's own start of it.
func (a *txnAge) opened(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.since.IsZero() {
		a.since = now
	}
}

// prepare notes that a snapshot recorded the open transaction, which began
// at since (its Txn.Expires less the timeout: the producer's own count).
func (a *txnAge) prepare(since time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.since, a.prepared = since, true
}

// ended notes that the transaction was committed, aborted or handed over
// (a restore, Close): the sink has none.
func (a *txnAge) ended() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.since, a.prepared = time.Time{}, false
}

func (a *txnAge) get() (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.since, a.prepared
}

// newMetrics creates the instruments of the sink of source partition src,
// whose transactions time out after timeout. Every one carries src's topic
// and partition, as chsink's do: one series per chain. The gauges are
// observed until close.
func newMetrics(mp metric.MeterProvider, src checkpoint.TopicPartition, timeout time.Duration) (metrics, error) {
	m := meter.New(mp, "sink/kafkasink")
	ms := metrics{
		attrs:     meter.Partition(src.Topic, src.Partition),
		txns:      m.Counter("exactlyonce.kafkasink.transactions", "{transaction}", "Prepared transactions by outcome: committed, restored, aborted (found aborted at restore), expired (near or past TransactionTimeout: not saved, or refused at the commit), failed."),
		records:   m.Counter("exactlyonce.kafkasink.records_written", "{record}", "Records acknowledged by the broker inside a transaction (replays included), visible once it commits."),
		precommit: m.Histogram("exactlyonce.kafkasink.precommit.duration", "s", "Time Snapshot held the chain at a barrier: sending the buffered records (the pre-commit)."),
		commit:    m.Histogram("exactlyonce.kafkasink.commit.duration", "s", "Time to commit a prepared transaction, at CheckpointCompleted or Restore."),
		fenced:    m.Counter("exactlyonce.kafkasink.fenced", "{producer}", "Sinks whose producer a newer incarnation of the chain fenced."),
		age:       &txnAge{},
	}
	ageGauge := m.FloatObservableGauge("exactlyonce.kafkasink.transaction.age", "s",
		"Age of the sink's open or prepared transaction (state), counted from just before its first record was sent; absent when none is open.")
	timeoutGauge := m.FloatObservableGauge("exactlyonce.kafkasink.transaction.timeout", "s",
		"The sink's TransactionTimeout: the broker aborts a transaction this old.")
	open := metric.WithAttributes(append(slices.Clone(ms.attrs), attribute.String("state", stateOpen))...)
	prepared := metric.WithAttributes(append(slices.Clone(ms.attrs), attribute.String("state", statePrepared))...)
	all := metric.WithAttributes(ms.attrs...)
	age := ms.age
	ms.reg = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveFloat64(timeoutGauge, timeout.Seconds(), all)
		since, isPrepared := age.get()
		switch {
		case since.IsZero():
		case isPrepared:
			o.ObserveFloat64(ageGauge, time.Since(since).Seconds(), prepared)
		default:
			o.ObserveFloat64(ageGauge, time.Since(since).Seconds(), open)
		}
		return nil
	}, ageGauge, timeoutGauge)
	if err := m.Err(); err != nil {
		return metrics{}, fmt.Errorf("kafkasink: metrics: %w", err)
	}
	ms.opt = metric.WithAttributes(ms.attrs...)
	return ms, nil
}

// close stops observing the gauges.
func (m *metrics) close() {
	if m.reg != nil {
		_ = m.reg.Unregister()
	}
}

// transaction counts a transaction ended with outcome, whose commit
// started at start.
func (m *metrics) transaction(outcome string, start time.Time) {
	m.commit.Record(context.Background(), time.Since(start).Seconds(), m.opt)
	m.outcome(outcome)
}

// outcome counts a transaction ended with outcome.
func (m *metrics) outcome(outcome string) {
	m.txns.Add(context.Background(), 1, metric.WithAttributes(append(m.attrs[:len(m.attrs):len(m.attrs)], attribute.String("outcome", outcome))...))
}

// failed counts err if it says the producer was fenced.
func (m *metrics) failed(err error) {
	if kafkatxn.IsFenced(err) {
		m.fenced.Add(context.Background(), 1, m.opt)
	}
}
