package chsink_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
)

// crashAfterUnackedInsert leaves a journal whose last batch (records
// [100, 150)) was inserted but not acknowledged, and returns checkpoint 1's
// state (through record 99).
func crashAfterUnackedInsert(t *testing.T, env chEnv, store *faultStorage) []byte {
	ctx := context.Background()
	s := env.newSink(t, store, chsink.Options{})
	require.NoError(t, feed(ctx, t, s, 0, 100))
	state, err := s.Snapshot(ctx, 1)
	require.NoError(t, err)
	require.NoError(t, feed(ctx, t, s, 100, 150))
	// Inserted; its ack would ride on the next intent, which never comes:
	// checkpoint 2 never completes (kill -9).
	_, err = s.Snapshot(ctx, 2)
	require.NoError(t, err)
	return state
}

func TestNondeterministicReplay(t *testing.T) {
	tests := []struct {
		name   string
		policy chsink.MismatchPolicy
	}{
		{"fail by default", chsink.MismatchFail},
		{"keep first version", chsink.MismatchKeepFirst},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := setup(t, eventsDDL)
			ctx := context.Background()
			store := &faultStorage{Storage: checkpoint.NewMemoryStorage()}
			state := crashAfterUnackedInsert(t, env, store)

			s := env.newSink(t, store, chsink.Options{OnMismatch: tt.policy})
			require.NoError(t, s.Restore(ctx, state))
			var err error
			for o := int64(100); o < 160 && err == nil; o++ {
				for i, r := range rowsOf(o) {
					r.Score++ // processing changed between runs
					if err = s.Add(ctx, sink.Position{Offset: o, Index: uint32(i)}, r); err != nil {
						break
					}
				}
			}
			if tt.policy == chsink.MismatchFail {
				require.ErrorIs(t, err, sink.ErrNondeterministic)
				var mis *sink.ContentMismatchError
				require.True(t, errors.As(err, &mis))
				assert.Equal(t, mis.Intent.Rows, mis.Rows)
				assert.NotEqual(t, mis.Intent.Hash, mis.Hash)
				return
			}
			require.NoError(t, err)
			_, err = s.Snapshot(ctx, 3)
			require.NoError(t, err)
			// Exactly one version of records [100, 150): the first one.
			env.assertExact(t, 160, false)
			assert.Equal(t, uint64(expectedRows(100, 150)), env.count(t,
				"SELECT count() FROM "+env.db+".events WHERE id >= 1000 AND id < 1500 AND score = id / 2"))
		})
	}
}

func TestReplayOutsideDedupWindow(t *testing.T) {
	env := setup(t, `CREATE TABLE %s.events (
	id UInt64, org String, kind LowCardinality(String), at DateTime64(3),
	score Float64, tags Array(String), note Nullable(String)
) ENGINE = MergeTree ORDER BY id SETTINGS non_replicated_deduplication_window = 3, enable_block_number_column = 1`)
	ctx := context.Background()
	store := &faultStorage{Storage: checkpoint.NewMemoryStorage()}
	state := crashAfterUnackedInsert(t, env, store)
	for i := 0; i < 5; i++ { // other writers fill the window
		env.exec(t, "INSERT INTO "+env.db+".events (id) VALUES ("+string(rune('1'+i))+"000000)")
	}

	s := env.newSink(t, store, chsink.Options{})
	require.NoError(t, s.Restore(ctx, state))
	err := feed(ctx, t, s, 100, 150)
	require.ErrorIs(t, err, sink.ErrOutsideDedupWindow)
	var ow *sink.OutsideWindowError
	require.True(t, errors.As(err, &ow))
	assert.GreaterOrEqual(t, ow.BlocksSince, int64(3))
}

func TestMetrics(t *testing.T) {
	env := setup(t, eventsDDL)
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	px := newProxy(t, env.addr)
	s := env.newSinkAt(t, px.Addr(), checkpoint.NewMemoryStorage(), chsink.Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	require.NoError(t, feed(ctx, t, s, 0, 3000))
	px.cutAfter.Store(20 << 10)
	_, err := s.Snapshot(ctx, 1)
	require.NoError(t, err)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					got[m.Name] += p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					got[m.Name] += int64(p.Count)
				}
			}
		}
	}
	assert.Equal(t, int64(expectedRows(0, 3000)), got["exactlyonce.sink.rows_written"])
	assert.Equal(t, int64(1), got["exactlyonce.sink.batches_written"])
	assert.GreaterOrEqual(t, got["exactlyonce.sink.retries"], int64(1))
	assert.Equal(t, int64(1), got["exactlyonce.sink.batch_duration"])
	assert.Equal(t, int64(0), got["exactlyonce.sink.buffered_rows"])
	assert.Equal(t, int64(1), got["exactlyonce.sink.snapshot_duration"])
	assert.Equal(t, int64(0), got["exactlyonce.sink.batches_flushed_ahead"])
}

func TestReplacingMergeTreeReadHelpers(t *testing.T) {
	env := setup(t, `CREATE TABLE %s.deploys (org UInt64, n UInt64, version UInt64) ENGINE = ReplacingMergeTree(version) ORDER BY org`)
	env.exec(t, "SYSTEM STOP MERGES "+env.db+".deploys")
	env.exec(t, "INSERT INTO "+env.db+".deploys VALUES (1, 10, 1)")
	env.exec(t, "INSERT INTO "+env.db+".deploys VALUES (1, 12, 2), (2, 5, 1)")
	assert.Equal(t, uint64(3), env.count(t, "SELECT count() FROM "+env.db+".deploys"), "before a merge both versions are visible")

	for _, q := range []string{
		chsink.SelectFinal(env.db, "deploys", []string{"org", "n"}, ""),
		chsink.SelectLatest(env.db, "deploys", []string{"org"}, "version", []string{"n"}),
	} {
		var org, n proto.ColUInt64
		var gotOrg, gotN []uint64
		require.NoError(t, env.conn.Do(context.Background(), ch.Query{Body: q + " ORDER BY org",
			Result: proto.Results{{Name: "org", Data: &org}, {Name: "n", Data: &n}},
			OnResult: func(context.Context, proto.Block) error {
				gotOrg, gotN = append(gotOrg, org...), append(gotN, n...)
				org.Reset()
				n.Reset()
				return nil
			}}), q)
		assert.Equal(t, []uint64{1, 2}, gotOrg, q)
		assert.Equal(t, []uint64{12, 5}, gotN, q)
	}
}

// A replay whose rows skip a journaled batch entirely, after rows that fell
// before it (outside any batch), writes those rows as a batch of their own:
// they are not inserted under the skipped batch's token, which ClickHouse
// already holds and would drop them under.
func TestReplaySkippingABatchKeepsRowsBeforeIt(t *testing.T) {
	env := setup(t, eventsDDL)
	ctx := context.Background()
	store := &faultStorage{Storage: checkpoint.NewMemoryStorage()}
	state := crashAfterUnackedInsert(t, env, store)

	s := env.newSink(t, store, chsink.Options{OnMismatch: chsink.MismatchKeepFirst})
	require.NoError(t, s.Restore(ctx, state))
	// Record 99 produced no row the first time; now it does, and records
	// [100, 150) produce none: processing changed between runs.
	extra := event{ID: 99_999, Org: "late", Kind: "push", At: time.UnixMilli(1_700_000_000_000).UTC()}
	require.NoError(t, s.Add(ctx, sink.Position{Offset: 99}, extra))
	require.NoError(t, feed(ctx, t, s, 150, 160))
	_, err := s.Snapshot(ctx, 3)
	require.NoError(t, err)

	assert.Equal(t, uint64(1), env.count(t, "SELECT count() FROM "+env.db+".events WHERE id = 99999"), "the row before the skipped batch")
	assert.Equal(t, uint64(expectedRows(0, 160)+1), env.count(t, "SELECT count() FROM "+env.db+".events"), "rows")
}
