package chsink_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/testkit"
)

type typical struct {
	At       time.Time
	Flag     bool
	U16      uint16
	I16      int16
	I8       int8
	F32      float32
	Priority uint8
}

// The constructors for a typical schema's columns write what ClickHouse
// reads back.
func TestTypicalColumns(t *testing.T) {
	addr, db := testkit.ClickHouse(t)
	ctx := context.Background()
	require.NoError(t, testkit.Exec(ctx, addr, db, `CREATE TABLE typical (at DateTime('UTC'), day Date, day32 Date32, flag Bool,
		u16 UInt16, i16 Int16, i8 Int8, f32 Float32, priority UInt8)
		ENGINE = MergeTree ORDER BY at SETTINGS non_replicated_deduplication_window = 10, enable_block_number_column = 1`))
	schema := func() []chsink.Column[typical] {
		return []chsink.Column[typical]{
			chsink.DateTime("at", func(r *typical) time.Time { return r.At }),
			chsink.Date("day", func(r *typical) time.Time { return r.At }),
			chsink.Date32("day32", func(r *typical) time.Time { return r.At }),
			chsink.Bool("flag", func(r *typical) bool { return r.Flag }),
			chsink.UInt16("u16", func(r *typical) uint16 { return r.U16 }),
			chsink.Int16("i16", func(r *typical) int16 { return r.I16 }),
			chsink.Int8("i8", func(r *typical) int8 { return r.I8 }),
			chsink.Float32("f32", func(r *typical) float32 { return r.F32 }),
			chsink.UInt8("priority", func(r *typical) uint8 { return r.Priority }),
		}
	}
	s, err := chsink.New(ctx, chsink.Table{Addr: addr, Name: "typical"}, checkpoint.TopicPartition{Topic: "typical"},
		checkpoint.NewMemoryStorage(), schema, chsink.Options{Database: db})
	require.NoError(t, err)
	defer s.Close()
	at := time.Date(2026, 10, 28, 23, 59, 58, 700_000_000, time.UTC)
	require.NoError(t, s.Add(ctx, sink.Position{Offset: 1}, typical{At: at, Flag: true, U16: 65535, I16: -32768, I8: -128, F32: 1.5, Priority: 3}))
	_, err = s.Snapshot(ctx, 1)
	require.NoError(t, err)
	assert.Equal(t, [][]string{{"2026-10-28 23:59:58", "2026-10-28", "2026-10-28", "true", "65535", "-32768", "-128", "1.5", "3"}},
		testkit.Rows(t, addr, db, "SELECT toString(at), toString(day), toString(day32), toString(flag), toString(u16), toString(i16), toString(i8), toString(f32), toString(priority) FROM typical"))
}
