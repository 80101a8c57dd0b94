package chsink_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
)

// TestFlushAheadOfBarrier shows the policy from outside: with barriers at a
// steady interval, the flush timer inserts the buffered rows shortly before
// each barrier, so the barrier inserts only the tail; with NoFlushAhead, or
// fewer buffered rows than FlushAheadMinRows, the barrier inserts the whole
// interval. Either way every row is in ClickHouse once.
func TestFlushAheadOfBarrier(t *testing.T) {
	tests := []struct {
		name      string
		give      chsink.Options
		wantAhead bool
	}{
		{"default", chsink.Options{FlushAheadMinRows: 100}, true},
		{"off", chsink.Options{FlushAheadMinRows: 100, NoFlushAhead: true}, false},
		{"below the minimum", chsink.Options{FlushAheadMinRows: 1_000_000}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := setup(t, eventsDDL)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			opts := tt.give
			opts.MaxDelay = time.Hour
			reader := sdkmetric.NewManualReader()
			opts.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			s := env.newSink(t, checkpoint.NewMemoryStorage(), opts)
			// Both hooks run under the sink's lock, batches in order: the
			// k-th batch recorded is the k-th written.
			var recordedAhead []bool
			var ahead, atBarrier []int // batch sizes
			s.SetHooks(func() { recordedAhead = append(recordedAhead, inSinkRun()) }, nil)
			s.SetAfterWrite(func(rows int) {
				if recordedAhead[len(ahead)+len(atBarrier)] {
					ahead = append(ahead, rows)
				} else {
					atBarrier = append(atBarrier, rows)
				}
			})
			runDone := make(chan error, 1)
			go func() { runDone <- s.Run(ctx) }()
			const interval, perInterval = 200 * time.Millisecond, 400 // records
			var off int64
			t0 := time.Now()
			for id := checkpoint.ID(1); id <= 8; id++ {
				start := t0.Add(interval * time.Duration(id-1)) // barriers on a ticker, as the coordinator's
				for i := range 10 {                             // the interval's records, spread over it
					require.NoError(t, feed(ctx, t, s, off, off+perInterval/10))
					off += perInterval / 10
					time.Sleep(time.Until(start.Add(interval * time.Duration(i+1) / 10)))
				}
				_, err := s.Snapshot(ctx, id)
				require.NoError(t, err)
				require.NoError(t, s.CheckpointCompleted(ctx, id))
			}
			cancel()
			require.ErrorIs(t, <-runDone, context.Canceled)
			env.assertExact(t, off, false)
			t.Logf("batches ahead of a barrier: %v; at a barrier: %v", ahead, atBarrier)
			var rm metricdata.ResourceMetrics
			require.NoError(t, reader.Collect(context.Background(), &rm))
			counted := int64(0)
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					if d, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "exactlyonce.sink.batches_flushed_ahead" {
						for _, p := range d.DataPoints {
							counted += p.Value
						}
					}
				}
			}
			assert.Equal(t, int64(len(ahead)), counted, "exactlyonce.sink.batches_flushed_ahead")
			if !tt.wantAhead {
				assert.Empty(t, ahead)
				return
			}
			// From the third interval on (two barriers teach the cadence)
			// the timer flushes ahead of barriers. How much goes ahead
			// depends on how steady the barriers and inserts are, which a
			// loaded machine shakes: the sizes are logged above.
			assert.NotEmpty(t, ahead)
		})
	}
}
