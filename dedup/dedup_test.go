package dedup_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/exactlyonce/exactlyonce/dedup"
)

var t0 = time.Date(2026, 10, 28, 15, 0, 0, 0, time.UTC)

func newDedup(t *testing.T, ttl time.Duration, opts dedup.Options) *dedup.Deduplicator {
	t.Helper()
	d, err := dedup.New(ttl, opts)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, d.Close()) })
	return d
}

func observe(t *testing.T, d *dedup.Deduplicator, key string, at time.Time) bool {
	t.Helper()
	first, err := d.Observe([]byte(key), at)
	require.NoError(t, err)
	return first
}

func TestNewValidates(t *testing.T) {
	tests := []struct {
		name string
		ttl  time.Duration
		opts dedup.Options
	}{
		{name: "zero TTL", ttl: 0},
		{name: "negative TTL", ttl: -time.Hour},
		{name: "sub-second TTL", ttl: time.Millisecond},
		{name: "TTL too long", ttl: dedup.MaxTTL + time.Second},
		{name: "unknown update type", ttl: time.Hour, opts: dedup.Options{UpdateType: 9}},
		{name: "unknown time characteristic", ttl: time.Hour, opts: dedup.Options{TimeCharacteristic: 9}},
		{name: "Now with event time", ttl: time.Hour, opts: dedup.Options{Now: time.Now}},
		{name: "negative MaxKeys", ttl: time.Hour, opts: dedup.Options{MaxKeys: -1}},
		{name: "negative ExpectedKeys", ttl: time.Hour, opts: dedup.Options{ExpectedKeys: -1}},
		{name: "ExpectedKeys too large", ttl: time.Hour, opts: dedup.Options{ExpectedKeys: math.MaxInt}},
		{name: "negative CleanupBudget", ttl: time.Hour, opts: dedup.Options{CleanupBudget: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := dedup.New(tt.ttl, tt.opts)
			assert.ErrorIs(t, err, dedup.ErrInvalidOptions)
		})
	}
	d, err := dedup.New(dedup.DefaultTTL, dedup.Options{})
	require.NoError(t, err, "zero Options must be valid")
	require.NoError(t, d.Close())
}

// TestTTLSemantics is the article's case: with a 24-hour TTL a duplicate 23
// hours later is caught; under OnCreateAndWrite that check does not extend
// the entry, under OnReadAndWrite it does.
func TestTTLSemantics(t *testing.T) {
	type step struct {
		at   time.Duration
		want bool // first sight
	}
	tests := []struct {
		name  string
		upd   dedup.UpdateType
		steps []step
	}{
		{
			name: "OnCreateAndWrite",
			upd:  dedup.OnCreateAndWrite,
			steps: []step{
				{at: 0, want: true},
				{at: 23 * time.Hour, want: false},
				{at: 24*time.Hour - time.Second, want: false},
				{at: 24 * time.Hour, want: true}, // expired: the check at 23h did not extend it
				{at: 25 * time.Hour, want: false},
			},
		},
		{
			name: "OnReadAndWrite",
			upd:  dedup.OnReadAndWrite,
			steps: []step{
				{at: 0, want: true},
				{at: 23 * time.Hour, want: false},
				{at: 25 * time.Hour, want: false}, // extended to 47h at hour 23
				{at: 49 * time.Hour, want: true},
			},
		},
	}
	for _, tt := range tests {
		for _, tc := range []dedup.TimeCharacteristic{dedup.EventTime, dedup.ProcessingTime} {
			t.Run(tt.name+"/"+tc.String(), func(t *testing.T) {
				var now time.Time
				opts := dedup.Options{UpdateType: tt.upd, TimeCharacteristic: tc}
				if tc == dedup.ProcessingTime {
					opts.Now = func() time.Time { return now }
				}
				d := newDedup(t, 24*time.Hour, opts)
				for _, s := range tt.steps {
					now = t0.Add(s.at)
					at := now
					if tc == dedup.ProcessingTime {
						at = time.Time{} // ignored
					}
					assert.Equalf(t, s.want, observe(t, d, "org:github:evt-1", at), "at %v", s.at)
				}
			})
		}
	}
}

// TestEventTimeClock: the clock is the largest timestamp seen, so a late
// event neither rewinds it nor revives expired keys, and a redelivery with an
// old timestamp is judged against the stream's progress.
func TestEventTimeClock(t *testing.T) {
	d := newDedup(t, time.Hour, dedup.Options{})
	require.True(t, observe(t, d, "a", t0))
	require.True(t, observe(t, d, "b", t0.Add(2*time.Hour)))
	assert.Equal(t, t0.Add(2*time.Hour), d.Clock())
	// "a" expired at t0+1h on the stream's clock, even though this
	// redelivery carries its original timestamp.
	assert.True(t, observe(t, d, "a", t0))
	assert.Equal(t, t0.Add(2*time.Hour), d.Clock(), "a late event must not rewind the clock")
	assert.False(t, observe(t, d, "a", t0))
	// Timestamps before 1970 do not move the clock.
	assert.False(t, observe(t, d, "b", time.Time{}))
}

// TestNeverReturnExpired: an expired entry is absent before cleanup has
// removed it.
func TestNeverReturnExpired(t *testing.T) {
	d := newDedup(t, time.Hour, dedup.Options{CleanupBudget: 1, ExpectedKeys: 100_000})
	for i := range 1000 {
		require.True(t, observe(t, d, fmt.Sprint(i), t0))
	}
	require.True(t, observe(t, d, "clock", t0.Add(time.Hour)))
	require.Equal(t, 1001, d.Len(), "entries are still stored")
	for i := range 1000 {
		assert.False(t, d.Contains([]byte(fmt.Sprint(i))), i)
	}
	assert.True(t, observe(t, d, "7", t0.Add(time.Hour)))
}

// TestCleanupBounded: each Observe removes at most CleanupBudget expired
// entries, and the sweep eventually removes all of them.
func TestCleanupBounded(t *testing.T) {
	const n, budget = 10_000, 4
	d := newDedup(t, time.Hour, dedup.Options{CleanupBudget: budget})
	for i := range n {
		require.True(t, observe(t, d, fmt.Sprint(i), t0))
	}
	later := t0.Add(2 * time.Hour)
	prev := d.Len()
	calls := 0
	for d.Len() > 1 {
		require.Equal(t, calls == 0, observe(t, d, "tick", later))
		calls++
		removed := prev - d.Len()
		if calls > 1 { // the first call inserted "tick"
			require.LessOrEqual(t, removed, budget)
		}
		prev = d.Len()
		require.Less(t, calls, 100*n, "cleanup never finished")
	}
	assert.Equal(t, 1, d.Len())
	assert.Zero(t, d.Cleanup(1_000_000))
}

func TestAppendKeyUnambiguous(t *testing.T) {
	tests := []struct {
		a, b []string
	}{
		{a: []string{"a:b", "c"}, b: []string{"a", "b:c"}},
		{a: []string{"ab"}, b: []string{"a", "b"}},
		{a: []string{"", "a"}, b: []string{"a", ""}},
		{a: []string{"a"}, b: []string{"a", ""}},
		{a: []string{"\x01a"}, b: []string{"a"}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q_vs_%q", tt.a, tt.b), func(t *testing.T) {
			assert.NotEqual(t, dedup.Key(tt.a...), dedup.Key(tt.b...))
		})
	}
	assert.Equal(t, dedup.Key("org", "github", "e1"), dedup.AppendKey(nil, "org", "github", "e1"))
	buf := make([]byte, 0, 64)
	assert.Zero(t, testing.AllocsPerRun(100, func() {
		buf = dedup.AppendKey(buf[:0], "org-42", "github", "0b1a2c3d-4e5f")
	}))
}

func TestMaxKeys(t *testing.T) {
	d := newDedup(t, time.Hour, dedup.Options{MaxKeys: 3})
	for _, k := range []string{"a", "b", "c"} {
		require.True(t, observe(t, d, k, t0))
	}
	_, err := d.Observe([]byte("d"), t0.Add(time.Minute))
	require.ErrorIs(t, err, dedup.ErrFull)
	assert.False(t, d.Contains([]byte("d")), "a refused key is not recorded")
	assert.Equal(t, t0, d.Clock(), "a refused call does not advance the clock")
	assert.False(t, observe(t, d, "a", t0), "duplicates are still answered when full")
	for _, k := range []string{"a", "b", "c"} {
		assert.True(t, d.Contains([]byte(k)), "nothing is evicted: %s", k)
	}
	// Once the entries expire, room is made without any explicit cleanup.
	require.True(t, observe(t, d, "b", t0.Add(time.Hour))) // expired: rewritten in place
	assert.True(t, observe(t, d, "d", t0.Add(time.Hour)))
}

// TestMaxKeysFreedByNewKeysClock: when the cap is reached and the stored
// keys have expired at the new key's time, the new key is accepted. With
// event time only a successful Observe advances the clock, so refusing it
// would refuse every new key after it, on every replay.
func TestMaxKeysFreedByNewKeysClock(t *testing.T) {
	d := newDedup(t, time.Hour, dedup.Options{MaxKeys: 3})
	for _, k := range []string{"a", "b", "c"} {
		require.True(t, observe(t, d, k, t0))
	}
	first, err := d.Observe([]byte("d"), t0.Add(2*time.Hour))
	require.NoError(t, err)
	assert.True(t, first)
	assert.Equal(t, t0.Add(2*time.Hour), d.Clock())
	assert.True(t, observe(t, d, "e", t0.Add(2*time.Hour)))
	assert.True(t, observe(t, d, "f", t0.Add(2*time.Hour)))
	_, err = d.Observe([]byte("g"), t0.Add(2*time.Hour))
	assert.ErrorIs(t, err, dedup.ErrFull)
}

func TestTimeOutOfRange(t *testing.T) {
	d := newDedup(t, 24*time.Hour, dedup.Options{})
	_, err := d.Observe([]byte("a"), time.Date(2106, 2, 7, 0, 0, 0, 0, time.UTC))
	require.ErrorIs(t, err, dedup.ErrTimeOutOfRange)
	assert.Zero(t, d.Len())
	assert.Equal(t, time.Unix(0, 0).UTC(), d.Clock())
}

func TestClose(t *testing.T) {
	d, err := dedup.New(time.Hour, dedup.Options{})
	require.NoError(t, err)
	require.NoError(t, d.Close())
	require.NoError(t, d.Close(), "Close is safe twice")
	_, err = d.Observe([]byte("a"), t0)
	assert.ErrorIs(t, err, dedup.ErrClosed)
	_, err = d.Snapshot(context.Background(), 1)
	assert.ErrorIs(t, err, dedup.ErrClosed)
	assert.ErrorIs(t, d.Restore(context.Background(), nil), dedup.ErrClosed)
}

// TestSnapshotRestoreSameAnswers: a restored deduplicator gives the same
// answer for every key, now and after each expiry.
func TestSnapshotRestoreSameAnswers(t *testing.T) {
	for _, exact := range []bool{false, true} {
		t.Run(fmt.Sprint("exact=", exact), func(t *testing.T) {
			const n = 5000
			ttl := time.Hour
			opts := dedup.Options{ExactKeys: exact}
			src := newDedup(t, ttl, opts)
			for i := range n {
				// Spread first sights over 50 minutes, then a clock tick.
				observe(t, src, fmt.Sprint("k", i), t0.Add(time.Duration(i)*600*time.Millisecond))
			}
			snap, err := src.Snapshot(context.Background(), 7)
			require.NoError(t, err)

			dst := newDedup(t, ttl, opts)
			require.NoError(t, dst.Restore(context.Background(), snap))
			assert.Equal(t, src.Clock(), dst.Clock())
			for i := range n + 100 {
				k := []byte(fmt.Sprint("k", i))
				require.Equal(t, src.Contains(k), dst.Contains(k), "key %s", k)
			}
			// Advance both in steps through every expiry.
			for step := time.Duration(0); step <= 2*time.Hour; step += 5 * time.Minute {
				at := t0.Add(step)
				for i := 0; i < n+100; i += 7 {
					k := []byte(fmt.Sprint("k", i))
					a, err := src.Observe(k, at)
					require.NoError(t, err)
					b, err := dst.Observe(k, at)
					require.NoError(t, err)
					require.Equal(t, a, b, "key %s at %v", k, step)
				}
			}
		})
	}
}

// TestSnapshotDeterministic: the same state gives the same bytes, whatever
// the insertion order, presizing, or history of expired entries.
func TestSnapshotDeterministic(t *testing.T) {
	ctx := context.Background()
	keys := make([]string, 3000)
	for i := range keys {
		keys[i] = fmt.Sprint("org:github:", i)
	}
	build := func(order []string, opts dedup.Options, garbage bool) []byte {
		d := newDedup(t, time.Hour, opts)
		if garbage {
			for i := range 500 {
				observe(t, d, fmt.Sprint("old", i), t0.Add(-2*time.Hour))
			}
		}
		for _, k := range order {
			observe(t, d, k, t0)
		}
		b, err := d.Snapshot(ctx, 1)
		require.NoError(t, err)
		again, err := d.Snapshot(ctx, 2)
		require.NoError(t, err)
		require.Equal(t, b, again)
		return b
	}
	for _, exact := range []bool{false, true} {
		t.Run(fmt.Sprint("exact=", exact), func(t *testing.T) {
			want := build(keys, dedup.Options{ExactKeys: exact}, false)
			shuffled := append([]string(nil), keys...)
			rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) {
				shuffled[i], shuffled[j] = shuffled[j], shuffled[i]
			})
			assert.Equal(t, want, build(shuffled, dedup.Options{ExactKeys: exact}, false), "insertion order")
			assert.Equal(t, want, build(keys, dedup.Options{ExactKeys: exact, ExpectedKeys: 1 << 16}, false), "table size")
			assert.Equal(t, want, build(shuffled, dedup.Options{ExactKeys: exact, CleanupBudget: 1}, true), "expired entries")
		})
	}
}

func TestSnapshotExactIntoHashed(t *testing.T) {
	ctx := context.Background()
	exact := newDedup(t, time.Hour, dedup.Options{ExactKeys: true})
	hashed := newDedup(t, time.Hour, dedup.Options{})
	for i := range 100 {
		observe(t, exact, fmt.Sprint(i), t0)
		observe(t, hashed, fmt.Sprint(i), t0)
	}
	snap, err := exact.Snapshot(ctx, 1)
	require.NoError(t, err)
	want, err := hashed.Snapshot(ctx, 1)
	require.NoError(t, err)

	d := newDedup(t, time.Hour, dedup.Options{})
	require.NoError(t, d.Restore(ctx, snap))
	got, err := d.Snapshot(ctx, 2)
	require.NoError(t, err)
	assert.Equal(t, want, got)

	require.ErrorIs(t, exact.Restore(ctx, want), dedup.ErrIncompatible)
}

// TestRestoreRejects: every truncation and every single-bit flip of a valid
// snapshot is rejected, and the state is left as it was.
func TestRestoreRejects(t *testing.T) {
	ctx := context.Background()
	for _, exact := range []bool{false, true} {
		t.Run(fmt.Sprint("exact=", exact), func(t *testing.T) {
			src := newDedup(t, time.Hour, dedup.Options{ExactKeys: exact})
			for i := range 20 {
				observe(t, src, fmt.Sprint("k", i), t0)
			}
			valid, err := src.Snapshot(ctx, 1)
			require.NoError(t, err)

			d := newDedup(t, time.Hour, dedup.Options{ExactKeys: exact})
			observe(t, d, "mine", t0.Add(time.Minute))
			before, err := d.Snapshot(ctx, 1)
			require.NoError(t, err)
			check := func(name string, b []byte) {
				err := d.Restore(ctx, b)
				require.Errorf(t, err, "%s accepted", name)
				if len(b) >= 10 && string(b[:8]) == "EODEDUP\x00" && (b[8] != 1 || b[9] != 0) {
					require.ErrorIsf(t, err, dedup.ErrUnsupportedVersion, name)
				} else {
					require.ErrorIsf(t, err, dedup.ErrCorrupt, name)
				}
			}
			for n := range len(valid) {
				check(fmt.Sprintf("truncated to %d", n), valid[:n])
			}
			check("trailing byte", append(append([]byte(nil), valid...), 0))
			for i := range len(valid) * 8 {
				b := append([]byte(nil), valid...)
				b[i/8] ^= 1 << (i % 8)
				check(fmt.Sprintf("bit %d flipped", i), b)
			}
			after, err := d.Snapshot(ctx, 2)
			require.NoError(t, err)
			assert.Equal(t, before, after, "a rejected restore changed the state")
			assert.True(t, d.Contains([]byte("mine")))
		})
	}
}

func TestRestoreMaxKeys(t *testing.T) {
	ctx := context.Background()
	src := newDedup(t, time.Hour, dedup.Options{})
	for i := range 10 {
		observe(t, src, fmt.Sprint(i), t0)
	}
	snap, err := src.Snapshot(ctx, 1)
	require.NoError(t, err)
	d := newDedup(t, time.Hour, dedup.Options{MaxKeys: 9})
	require.ErrorIs(t, d.Restore(ctx, snap), dedup.ErrFull)
	assert.Zero(t, d.Len())
}

func TestMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	attrs := []attribute.KeyValue{attribute.Int("partition", 3)}
	d := newDedup(t, time.Hour, dedup.Options{MeterProvider: mp, MetricAttributes: attrs, CleanupBudget: 1 << 20})
	observe(t, d, "a", t0)
	observe(t, d, "b", t0)
	observe(t, d, "a", t0)
	observe(t, d, "c", t0.Add(time.Hour))         // cleans up a and b
	_, err := d.Snapshot(context.Background(), 1) // publishes the counts
	require.NoError(t, err)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range data.DataPoints {
					got[m.Name] = p.Value
					assert.Equal(t, attribute.NewSet(attrs...), p.Attributes)
				}
			case metricdata.Gauge[int64]:
				for _, p := range data.DataPoints {
					got[m.Name] = p.Value
				}
			}
		}
	}
	assert.Equal(t, map[string]int64{
		"exactlyonce.dedup.first_seen": 3,
		"exactlyonce.dedup.dropped":    1,
		"exactlyonce.dedup.expired":    2,
		"exactlyonce.dedup.keys":       1,
	}, got)
}

// TestConcurrentMetricCollection: the owner goroutine observes while another
// collects metrics; run with -race.
func TestConcurrentMetricCollection(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	d := newDedup(t, time.Minute, dedup.Options{MeterProvider: mp})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			var rm metricdata.ResourceMetrics
			assert.NoError(t, reader.Collect(context.Background(), &rm))
		}
	})
	for i := range 20_000 {
		_, err := d.Observe([]byte(fmt.Sprint(i%5000)), t0.Add(time.Duration(i)*time.Millisecond*10))
		require.NoError(t, err)
	}
	close(stop)
	wg.Wait()
}

// TestPartitionsIndependent: one deduplicator per partition, each owned by
// its own goroutine, as the checkpoint source runs them; run with -race.
func TestPartitionsIndependent(t *testing.T) {
	const partitions = 4
	var wg sync.WaitGroup
	firsts := make([]int, partitions)
	for p := range partitions {
		d := newDedup(t, time.Hour, dedup.Options{})
		wg.Go(func() {
			for i := range 10_000 {
				first, err := d.Observe([]byte(fmt.Sprint(i%1000)), t0)
				if !assert.NoError(t, err) {
					return
				}
				if first {
					firsts[p]++
				}
			}
		})
	}
	wg.Wait()
	assert.Equal(t, []int{1000, 1000, 1000, 1000}, firsts)
}

// TestCleanupReadsTheProcessingClock: with ProcessingTime, a deduplicator
// that goes idle after a burst gives the memory back when Cleanup is called
// later, without another Observe: Cleanup reads Options.Now. The snapshot
// taken after that Cleanup holds no expired key either.
func TestCleanupReadsTheProcessingClock(t *testing.T) {
	ctx := context.Background()
	now := t0
	d := newDedup(t, time.Hour, dedup.Options{
		TimeCharacteristic: dedup.ProcessingTime,
		Now:                func() time.Time { return now },
	})
	const n = 5000
	for i := range n {
		require.True(t, observe(t, d, fmt.Sprint(i), time.Time{}))
	}
	now = now.Add(2 * time.Hour) // idle: no Observe from here on
	assert.Equal(t, n, d.Cleanup(10*n), "every key expired by Now is removed")
	assert.Zero(t, d.Len())
	assert.Equal(t, now, d.Clock(), "the clock moved to Now")
	for _, k := range []string{"0", "4999"} {
		assert.False(t, d.Contains([]byte(k)), k)
	}
	snap, err := d.Snapshot(ctx, 1)
	require.NoError(t, err)
	restored := newDedup(t, time.Hour, dedup.Options{TimeCharacteristic: dedup.ProcessingTime, Now: func() time.Time { return now }})
	require.NoError(t, restored.Restore(ctx, snap))
	assert.Zero(t, restored.Len(), "the snapshot keeps no key expired before Cleanup's clock")
}
