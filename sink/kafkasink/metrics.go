package kafkasink

import (
	"context"
	"fmt"
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
}

// newMetrics creates the instruments of the sink of source partition src.
// Every one carries src's topic and partition, as chsink's do: one series
// per chain.
func newMetrics(mp metric.MeterProvider, src checkpoint.TopicPartition) (metrics, error) {
	m := meter.New(mp, "sink/kafkasink")
	ms := metrics{
		attrs:     meter.Partition(src.Topic, src.Partition),
		txns:      m.Counter("exactlyonce.kafkasink.transactions", "{transaction}", "Prepared transactions by outcome: committed, restored, aborted (found aborted at restore), expired (near or past TransactionTimeout: not saved, or refused at the commit), failed."),
		records:   m.Counter("exactlyonce.kafkasink.records_written", "{record}", "Records acknowledged by the broker inside a transaction (replays included), visible once it commits."),
		precommit: m.Histogram("exactlyonce.kafkasink.precommit.duration", "s", "Time Snapshot held the chain at a barrier: sending the buffered records (the pre-commit)."),
		commit:    m.Histogram("exactlyonce.kafkasink.commit.duration", "s", "Time to commit a prepared transaction, at CheckpointCompleted or Restore."),
		fenced:    m.Counter("exactlyonce.kafkasink.fenced", "{producer}", "Sinks whose producer a newer incarnation of the chain fenced."),
	}
	if err := m.Err(); err != nil {
		return metrics{}, fmt.Errorf("kafkasink: metrics: %w", err)
	}
	ms.opt = metric.WithAttributes(ms.attrs...)
	return ms, nil
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
