package chsink_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestReadOnlyReplicaKeepsBatches: a ReplicatedMergeTree table that is
// read-only, as every replica is while it has no ZooKeeper session (and as
// clickhouse-local's replicas always are), refuses each insert with
// TABLE_IS_READ_ONLY. The sink retries it, then fails the checkpoint with a
// retryable *InsertError, and drops nothing: once the table takes inserts
// again, a sink restored from the last completed checkpoint writes every
// row exactly once. clickhouse-local's replica never becomes writable, so
// the table's coming back is played by a writable table of the same name
// (see docs/replicated.md).
func TestReadOnlyReplicaKeepsBatches(t *testing.T) {
	addr, db := testkit.ReplicatedClickHouse(t)
	ctx := context.Background()
	c, err := ch.Dial(ctx, ch.Options{Address: addr, Database: db})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	exec := func(q string) { require.NoError(t, c.Do(ctx, ch.Query{Body: fmt.Sprintf(q, db)}), q) }
	const columns = `id UInt64, org String, kind LowCardinality(String), at DateTime64(3),
		score Float64, tags Array(String), note Nullable(String)`
	exec("CREATE TABLE %s.events (" + columns + ") ENGINE = ReplicatedMergeTree('/clickhouse/tables/{database}/{table}', '{replica}') ORDER BY id")

	store := checkpoint.NewMemoryStorage()
	// The server retries a read-only insert itself first (20 times by
	// default, backing off to 10 s): without that the test takes
	// seconds, and the sink sees what it sees after the server's retries.
	opts := chsink.Options{Database: db, MaxRows: 20, MaxAttempts: 3, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
		Client: ch.Options{Settings: []ch.Setting{{Key: "insert_keeper_max_retries", Value: "0"}}}}
	newSink := func() *chsink.Sink[event] {
		s, err := chsink.New(ctx, chsink.Table{Addr: addr, Name: "events"},
			checkpoint.TopicPartition{Topic: "events"}, store, eventSchema, opts)
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	s := newSink()
	state, err := s.Snapshot(ctx, 1)
	require.NoError(t, err)
	require.NoError(t, s.CheckpointCompleted(ctx, 1))
	err = feed(ctx, t, s, 0, 100)
	if err == nil {
		_, err = s.Snapshot(ctx, 2)
	}
	require.Error(t, err)
	var ie *chsink.InsertError
	require.True(t, errors.As(err, &ie), "%v", err)
	assert.False(t, ie.Permanent, "a read-only replica is a passing condition")
	assert.Equal(t, 3, ie.Attempts)
	assert.True(t, ch.IsErr(err, proto.ErrTableIsReadOnly), "%v", err)
	_ = s.Close()

	// The table takes inserts again.
	exec("DROP TABLE %s.events SYNC")
	exec("CREATE TABLE %s.events (" + columns + ") ENGINE = MergeTree ORDER BY id SETTINGS non_replicated_deduplication_window = 1000, enable_block_number_column = 1")
	s = newSink()
	require.NoError(t, s.Restore(ctx, state))
	require.NoError(t, feed(ctx, t, s, 0, 100))
	_, err = s.Snapshot(ctx, 3)
	require.NoError(t, err)
	n := testkit.Count(t, addr, db, "SELECT count() FROM events")
	assert.Equal(t, uint64(expectedRows(0, 100)), n)
	assert.Equal(t, n, testkit.Count(t, addr, db, "SELECT uniqExact(id) FROM events"))
}
