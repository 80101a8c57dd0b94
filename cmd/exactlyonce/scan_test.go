package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/audit/chaudit"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestAuditScan: the full check by event id reads a topic whose records
// carry the gateway's event-id header and a table, and names the ids lost
// (in the topic, not in the table), duplicated (two rows) and only in the
// table, whatever the number of parts the id space is scanned in (the
// parts split ids by CRC32 in Go and in ClickHouse alike: a mismatch
// would show as lost and foreign ids). A record Kafka holds twice (a lost
// acknowledgement) is no finding. A table holding each id once passes.
func TestAuditScan(t *testing.T) {
	addr, db := testkit.ClickHouse(t)
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "scan")
	testkit.CreateTopic(t, brokers, topic, 2)
	ctx := context.Background()
	require.NoError(t, chaudit.CreateTable(ctx, ch.Options{Address: addr}, db, chaudit.DefaultTable))
	for _, tbl := range []string{"rows", "clean"} {
		require.NoError(t, testkit.Exec(ctx, addr, db, "CREATE TABLE "+tbl+" (event_id String) ENGINE = MergeTree ORDER BY event_id"))
	}
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), RequiredAcks: kafka.RequireAll, Topic: topic, Balancer: &kafka.Hash{}, Transport: &kafka.Transport{}}
	defer w.Close()
	at := time.Now().Add(-time.Hour)
	var msgs []kafka.Message
	var rows, clean []string
	for i := range 20 {
		id := fmt.Sprint("e", i)
		msgs = append(msgs, kafka.Message{Key: []byte(id), Time: at, Headers: []kafka.Header{{Key: "event-id", Value: []byte(id)}}})
		clean = append(clean, "('"+id+"')")
		if i != 5 {
			rows = append(rows, "('"+id+"')")
		}
	}
	msgs = append(msgs, msgs[3], kafka.Message{Key: []byte("ping"), Time: at}) // e3 again; a record without an id
	rows = append(rows, "('e7')", "('x1')")
	require.NoError(t, w.WriteMessages(ctx, msgs...))
	require.NoError(t, testkit.Exec(ctx, addr, db, "INSERT INTO rows VALUES "+strings.Join(rows, ", ")))
	require.NoError(t, testkit.Exec(ctx, addr, db, "INSERT INTO clean VALUES "+strings.Join(clean, ", ")))
	args := func(table string, more ...string) []string {
		return append([]string{"audit", "-clickhouse", addr, "-database", db, "-settle", "1m",
			"-brokers", strings.Join(brokers, ","), "-scan-topic", topic, "-scan-table", table}, more...)
	}

	for _, shards := range []string{"1", "3"} {
		t.Run("shards="+shards, func(t *testing.T) {
			code, out, errOut := exec(t, nil, args("rows", "-scan-shards", shards, "-json")...)
			require.Equal(t, exitDifference, code, "%s%s", out, errOut)
			var got auditOutput
			require.NoError(t, json.Unmarshal([]byte(out), &got))
			require.NotNil(t, got.Scan)
			s := got.Scan
			assert.Equal(t, idList{Count: 1, Examples: []string{"e5"}}, s.Missing)
			assert.Equal(t, idList{Count: 1, Examples: []string{"e7"}}, s.Doubled)
			assert.Equal(t, idList{Count: 1, Examples: []string{"x1"}}, s.NotInTopic)
			assert.Equal(t, idList{Examples: []string{}}, s.Pending)
			assert.Equal(t, []uint64{22, 1, 20, 1, 21, 20}, []uint64{s.Records, s.NoID, s.IDs, s.KafkaRepeats, s.Rows, s.TableIDs})
		})
	}
	code, out, errOut := exec(t, nil, args("rows")...)
	assert.Equal(t, exitDifference, code, errOut)
	assert.Contains(t, out, "LOST: 1 event ids in the topic, not in the table, e.g. e5")
	assert.Contains(t, out, "DUPLICATED: 1 event ids in more than one row, e.g. e7")

	code, out, errOut = exec(t, nil, args("clean")...)
	assert.Equal(t, exitOK, code, "%s%s", out, errOut)
	assert.Contains(t, out, "every settled event id of the topic is in the table exactly once")

	// Young records not in the table yet are pending, not lost.
	code, out, errOut = exec(t, nil, args("rows", "-settle", "2h", "-json")...)
	require.Equal(t, exitDifference, code, errOut) // e7 is still doubled
	var got auditOutput
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	assert.Equal(t, idList{Count: 1, Examples: []string{"e5"}}, got.Scan.Pending)
	assert.Zero(t, got.Scan.Missing.Count)

	// Bad input: exit 2 with the reason.
	for _, tt := range []struct {
		args []string
		want string
	}{
		{args("rows", "-scan-id", "nope"), "has no column nope"},
		{args("absent"), "table " + db + ".absent does not exist"},
		{args(""), "-scan-topic needs -scan-table"},
		{args("rows", "-scan-shards", "0"), "-scan-shards 0"},
		{args("rows", "-brokers", "127.0.0.1:1"), "reach Kafka at"},
	} {
		code, _, errOut := exec(t, nil, tt.args...)
		assert.Equal(t, exitError, code, errOut)
		assert.Contains(t, errOut, tt.want)
	}
}
