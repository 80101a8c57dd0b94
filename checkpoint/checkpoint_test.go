package checkpoint_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// counter is a participant whose state is a number.
type counter struct {
	n         uint64
	snapErr   error
	completed []checkpoint.ID
}

func (c *counter) Snapshot(context.Context, checkpoint.ID) ([]byte, error) {
	if c.snapErr != nil {
		return nil, c.snapErr
	}
	return binary.BigEndian.AppendUint64(nil, c.n), nil
}

func (c *counter) Restore(_ context.Context, b []byte) error {
	if len(b) != 8 {
		return errors.New("bad counter state")
	}
	c.n = binary.BigEndian.Uint64(b)
	return nil
}

func (c *counter) CheckpointCompleted(_ context.Context, id checkpoint.ID) error {
	c.completed = append(c.completed, id)
	return nil
}

var p0 = checkpoint.TopicPartition{Topic: "t", Partition: 0}

func newCoord(t *testing.T, storage checkpoint.Storage, opts checkpoint.Options) *checkpoint.Coordinator {
	t.Helper()
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{Keep: 2})
	require.NoError(t, err)
	if opts.Interval == 0 {
		opts.Interval = -1
	}
	c, err := checkpoint.NewCoordinator(store, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	cp := &checkpoint.Checkpoint{
		ID: 7, Partition: p0, NextOffset: 42,
		States:  map[string][]byte{"b": {1, 2}, "a": {}, "c": []byte("xyz")},
		Created: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), Duration: time.Millisecond,
		Generation: 3, Member: "m-1",
	}
	data, err := checkpoint.Encode(cp)
	require.NoError(t, err)
	again, err := checkpoint.Encode(cp)
	require.NoError(t, err)
	assert.Equal(t, data, again, "encoding is deterministic")
	got, err := checkpoint.Decode(data)
	require.NoError(t, err)
	assert.Equal(t, cp.States["c"], got.States["c"])
	assert.Empty(t, got.States["a"])
	got.States, cp.States = nil, nil
	assert.Equal(t, cp, got)
}

func TestDecodeRejectsDamage(t *testing.T) {
	cp := &checkpoint.Checkpoint{ID: 1, Partition: p0, NextOffset: 5, States: map[string][]byte{"x": []byte("state")}}
	data, err := checkpoint.Encode(cp)
	require.NoError(t, err)
	tests := []struct {
		name string
		give []byte
	}{
		{name: "empty", give: nil},
		{name: "truncated", give: data[:len(data)-1]},
		{name: "half", give: data[:len(data)/2]},
		{name: "bit flip", give: func() []byte { b := append([]byte(nil), data...); b[len(b)/2] ^= 1; return b }()},
		{name: "bad magic", give: append([]byte("XXXXXXXX"), data[8:]...)},
		{name: "appended", give: append(append([]byte(nil), data...), 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := checkpoint.Decode(tt.give)
			assert.ErrorIs(t, err, checkpoint.ErrCorrupt)
		})
	}
}

func FuzzDecode(f *testing.F) {
	data, _ := checkpoint.Encode(&checkpoint.Checkpoint{ID: 1, Partition: p0, States: map[string][]byte{"x": {1}}})
	f.Add(data)
	f.Fuzz(func(t *testing.T, b []byte) {
		cp, err := checkpoint.Decode(b)
		if err != nil {
			return
		}
		again, err := checkpoint.Encode(cp)
		require.NoError(t, err)
		_, err = checkpoint.Decode(again)
		require.NoError(t, err)
	})
}

func TestCheckpointRestoreAndKeep(t *testing.T) {
	ctx := context.Background()
	storage := checkpoint.NewMemoryStorage()
	coord := newCoord(t, storage, checkpoint.Options{})
	c := &counter{}
	task, err := coord.Attach(ctx, p0, map[string]checkpoint.Participant{"c": c})
	require.NoError(t, err)
	assert.Nil(t, task.Restored(), "fresh start")
	for i := range 4 {
		c.n = uint64(i * 10)
		require.NoError(t, task.Checkpoint(ctx, nil, int64(i*10), checkpoint.Meta{}, nil))
	}
	assert.Equal(t, []checkpoint.ID{1, 2, 3, 4}, c.completed)
	ids, err := coord.Store().List(ctx, p0)
	require.NoError(t, err)
	assert.Equal(t, []checkpoint.ID{4, 3}, ids, "keeps the newest two")
	task.Detach()
	task.Detach()

	c2 := &counter{}
	task2, err := coord.Attach(ctx, p0, map[string]checkpoint.Participant{"c": c2})
	require.NoError(t, err)
	require.NotNil(t, task2.Restored())
	assert.Equal(t, int64(30), task2.Restored().NextOffset)
	assert.Equal(t, uint64(30), c2.n)
	require.NoError(t, task2.Checkpoint(ctx, nil, 31, checkpoint.Meta{}, nil))
	assert.Equal(t, []checkpoint.ID{5}, c2.completed, "IDs continue after the restored one")
}

func TestCorruptNewestFallsBack(t *testing.T) {
	ctx := context.Background()
	storage, err := checkpoint.NewFSStorage(filepath.Join(t.TempDir(), "s"))
	require.NoError(t, err)
	coord := newCoord(t, storage, checkpoint.Options{})
	c := &counter{}
	task, err := coord.Attach(ctx, p0, map[string]checkpoint.Participant{"c": c})
	require.NoError(t, err)
	c.n = 1
	require.NoError(t, task.Checkpoint(ctx, nil, 100, checkpoint.Meta{}, nil))
	c.n = 2
	require.NoError(t, task.Checkpoint(ctx, nil, 200, checkpoint.Meta{}, nil))
	task.Detach()

	names, err := storage.List(ctx, "")
	require.NoError(t, err)
	require.Len(t, names, 2)
	newest := names[1]
	data, err := storage.Get(ctx, newest)
	require.NoError(t, err)
	require.NoError(t, storage.Put(ctx, newest, data[:len(data)-3])) // truncated

	c2 := &counter{}
	task2, err := coord.Attach(ctx, p0, map[string]checkpoint.Participant{"c": c2})
	require.NoError(t, err)
	require.NotNil(t, task2.Restored())
	assert.Equal(t, int64(100), task2.Restored().NextOffset)
	assert.Equal(t, uint64(1), c2.n)
}

func TestSnapshotFailureWritesNothing(t *testing.T) {
	ctx := context.Background()
	storage := checkpoint.NewMemoryStorage()
	coord := newCoord(t, storage, checkpoint.Options{})
	good, bad := &counter{}, &counter{snapErr: errors.New("boom")}
	task, err := coord.Attach(ctx, p0, map[string]checkpoint.Participant{"a": good, "b": bad})
	require.NoError(t, err)
	committed := false
	err = task.Checkpoint(ctx, nil, 10, checkpoint.Meta{}, func(context.Context, int64) error {
		committed = true
		return nil
	})
	var cerr *checkpoint.Error
	require.ErrorAs(t, err, &cerr)
	assert.Equal(t, "b", cerr.Participant)
	assert.Equal(t, "snapshot", cerr.Op)
	assert.False(t, committed, "no offset commit")
	assert.Empty(t, good.completed, "no completion notice")
	names, err := storage.List(ctx, "")
	require.NoError(t, err)
	assert.Empty(t, names, "nothing written")
}

// ctxBlindStorage ignores the caller's context, as a backend with no
// cancellation support might.
type ctxBlindStorage struct{ checkpoint.Storage }

func (s ctxBlindStorage) Put(_ context.Context, name string, data []byte) error {
	return s.Storage.Put(context.Background(), name, data)
}

// TestEndedOwnershipWritesNothing shows that a chain whose context ended
// (its partition was revoked) writes no checkpoint and commits no offset,
// even over a Storage that ignores the context.
func TestEndedOwnershipWritesNothing(t *testing.T) {
	storage := checkpoint.NewMemoryStorage()
	coord := newCoord(t, ctxBlindStorage{storage}, checkpoint.Options{})
	c := &counter{}
	task, err := coord.Attach(context.Background(), p0, map[string]checkpoint.Participant{"c": c})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	committed := false
	err = task.Checkpoint(ctx, nil, 10, checkpoint.Meta{}, func(context.Context, int64) error {
		committed = true
		return nil
	})
	require.ErrorIs(t, err, context.Canceled)
	assert.False(t, committed, "no offset commit")
	assert.Empty(t, c.completed, "no completion notice")
	names, err := storage.List(context.Background(), "")
	require.NoError(t, err)
	assert.Empty(t, names, "nothing written")
}

// decliner declines every barrier.
type decliner struct{ counter }

func (*decliner) Snapshot(context.Context, checkpoint.ID) ([]byte, error) {
	return nil, fmt.Errorf("mid-batch: %w", checkpoint.ErrDeclined)
}

// TestDeclinedIsSkippedNotFailed shows that a participant wrapping
// ErrDeclined skips the checkpoint like a failure (nothing written, no
// commit, no notice) but is counted as a decline, not a failure, and that
// the next checkpoint continues with a later ID.
func TestDeclinedIsSkippedNotFailed(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	storage := checkpoint.NewMemoryStorage()
	coord := newCoord(t, storage, checkpoint.Options{
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
	})
	good, d := &counter{}, &decliner{}
	task, err := coord.Attach(ctx, p0, map[string]checkpoint.Participant{"a": good, "d": d})
	require.NoError(t, err)
	committed := false
	err = task.Checkpoint(ctx, nil, 10, checkpoint.Meta{}, func(context.Context, int64) error {
		committed = true
		return nil
	})
	var cerr *checkpoint.Error
	require.ErrorAs(t, err, &cerr)
	assert.ErrorIs(t, err, checkpoint.ErrDeclined)
	assert.Equal(t, "d", cerr.Participant)
	assert.False(t, committed, "no offset commit")
	assert.Empty(t, good.completed, "no completion notice")
	names, err := storage.List(ctx, "")
	require.NoError(t, err)
	assert.Empty(t, names, "nothing written")

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	sums := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if d, ok := m.Data.(metricdata.Sum[int64]); ok {
				sums[m.Name] = d.DataPoints[0].Value
			}
		}
	}
	assert.Equal(t, map[string]int64{"exactlyonce.checkpoint.declines": 1}, sums)

	task.Detach()
	task2, err := coord.Attach(ctx, p0, map[string]checkpoint.Participant{"a": good})
	require.NoError(t, err)
	assert.Nil(t, task2.Restored(), "the declined checkpoint left nothing to restore")
}

func TestUnknownStateRefused(t *testing.T) {
	ctx := context.Background()
	coord := newCoord(t, checkpoint.NewMemoryStorage(), checkpoint.Options{})
	task, err := coord.Attach(ctx, p0, map[string]checkpoint.Participant{"old": &counter{}})
	require.NoError(t, err)
	require.NoError(t, task.Checkpoint(ctx, nil, 1, checkpoint.Meta{}, nil))
	task.Detach()
	_, err = coord.Attach(ctx, p0, map[string]checkpoint.Participant{"new": &counter{}})
	assert.ErrorIs(t, err, checkpoint.ErrUnknownState)
}

func TestTriggerWaitsForChainsAndDetach(t *testing.T) {
	ctx := context.Background()
	coord := newCoord(t, checkpoint.NewMemoryStorage(), checkpoint.Options{})
	c := &counter{}
	task, err := coord.Attach(ctx, p0, map[string]checkpoint.Participant{"c": c})
	require.NoError(t, err)

	// A chain goroutine: takes barriers between "records".
	stop := make(chan struct{})
	chainDone := make(chan struct{})
	go func() {
		defer close(chainDone)
		for {
			select {
			case <-stop:
				task.Detach()
				return
			case b := <-task.Barriers():
				_ = task.Checkpoint(ctx, b, int64(c.n), checkpoint.Meta{}, nil)
			}
		}
	}()
	require.NoError(t, coord.Trigger(ctx))
	require.NoError(t, coord.Trigger(ctx))
	close(stop)
	<-chainDone
	// Trigger returns once the checkpoint is durable; the chain notifies its
	// synchronous participants in its own goroutine after that.
	assert.Equal(t, []checkpoint.ID{1, 2}, c.completed)
	require.NoError(t, coord.Trigger(ctx), "no chains attached: nothing to do")

	// A barrier pending when the chain detaches fails with ErrChainStopped.
	task2, err := coord.Attach(ctx, checkpoint.TopicPartition{Topic: "t", Partition: 1}, map[string]checkpoint.Participant{"c": &counter{}})
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() { errc <- coord.Trigger(ctx) }()
	require.Eventually(t, func() bool { return len(task2.Barriers()) == 1 }, 5*time.Second, time.Millisecond)
	task2.Detach()
	assert.ErrorIs(t, <-errc, checkpoint.ErrChainStopped)
}

func TestMetrics(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	coord := newCoord(t, checkpoint.NewMemoryStorage(), checkpoint.Options{
		MeterProvider: mp, Now: func() time.Time { return now },
	})
	c := &counter{}
	task, err := coord.Attach(ctx, p0, map[string]checkpoint.Participant{"c": c})
	require.NoError(t, err)
	require.NoError(t, task.Checkpoint(ctx, nil, 5, checkpoint.Meta{}, nil))
	c.snapErr = errors.New("x")
	require.Error(t, task.Checkpoint(ctx, nil, 6, checkpoint.Meta{}, nil))
	task.SetLag(17)
	now = now.Add(3 * time.Second)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	got := map[string]any{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				got[m.Name] = d.DataPoints[0].Count
			case metricdata.Histogram[int64]:
				got[m.Name] = d.DataPoints[0].Count
			case metricdata.Sum[int64]:
				got[m.Name] = d.DataPoints[0].Value
			case metricdata.Gauge[float64]:
				got[m.Name] = d.DataPoints[0].Value
			case metricdata.Gauge[int64]:
				got[m.Name] = d.DataPoints[0].Value
			}
		}
	}
	assert.Equal(t, map[string]any{
		"exactlyonce.checkpoint.duration":           uint64(1),
		"exactlyonce.checkpoint.hold":               uint64(2),
		"exactlyonce.checkpoint.size":               uint64(1),
		"exactlyonce.checkpoint.failures":           int64(1),
		"exactlyonce.checkpoint.last_completed.age": 3.0,
		"exactlyonce.checkpoint.consumer.lag":       int64(17),
	}, got)
}
