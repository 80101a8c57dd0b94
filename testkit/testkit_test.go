package testkit_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestTableFinal proves Table reads every row ordered by all columns, and
// with Final the merged view of a ReplacingMergeTree: two versions of a
// row, inserted in two parts that no merge has joined yet, are one row.
func TestTableFinal(t *testing.T) {
	addr, db := testkit.ClickHouse(t)
	ctx := t.Context()
	require.NoError(t, testkit.Exec(ctx, addr, db, `CREATE TABLE w (k String, n UInt32, v UInt64)
		ENGINE = ReplacingMergeTree(v) ORDER BY k`))
	require.NoError(t, testkit.Exec(ctx, addr, db, `SYSTEM STOP MERGES w`))
	require.NoError(t, testkit.Exec(ctx, addr, db, `INSERT INTO w VALUES ('b', 1, 1), ('a', 5, 1)`))
	require.NoError(t, testkit.Exec(ctx, addr, db, `INSERT INTO w VALUES ('b', 2, 2)`))

	assert.Equal(t, [][]string{{"a", "5", "1"}, {"b", "1", "1"}, {"b", "2", "2"}}, testkit.Table(t, addr, db, "w"))
	assert.Equal(t, [][]string{{"a", "5", "1"}, {"b", "2", "2"}}, testkit.Table(t, addr, db, "w", testkit.Final))
	assert.Equal(t, uint64(2), testkit.Count(t, addr, db, "SELECT count() FROM w FINAL"))
	assert.Equal(t, [][]string{{"b", "3"}}, testkit.Rows(t, addr, db, "SELECT k, sum(n) FROM w WHERE k = 'b' GROUP BY k"))
}

// TestKafkaAndRedis proves the brokers and the Redis address the kit hands
// out serve the clients the SDK uses.
func TestKafkaAndRedis(t *testing.T) {
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "topic")
	testkit.CreateTopic(t, brokers, topic, 2)
	conn, err := kafka.DialContext(t.Context(), "tcp", brokers[0])
	require.NoError(t, err)
	defer conn.Close()
	parts, err := conn.ReadPartitions(topic)
	require.NoError(t, err)
	assert.Len(t, parts, 2)

	rdb := redis.NewClient(&redis.Options{Addr: testkit.Redis(t)})
	defer rdb.Close()
	require.NoError(t, rdb.Set(context.Background(), "k", "v", 0).Err())
	assert.Equal(t, "v", rdb.Get(context.Background(), "k").Val())
}
