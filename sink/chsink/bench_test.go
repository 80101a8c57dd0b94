package chsink_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/internal/testenv"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
)

const benchBatch = 50_000

func benchRows() []event {
	rows := make([]event, benchBatch)
	for i := range rows {
		rows[i] = event{
			ID: uint64(i), Org: fmt.Sprintf("org-%d", i%50), Kind: []string{"push", "pr.merged", "issue"}[i%3],
			At: time.UnixMilli(1_700_000_000_000 + int64(i)).UTC(), Score: float64(i), Tags: []string{"a", "b"},
		}
	}
	return rows
}

// BenchmarkInsert inserts the same batches of 50,000 rows through raw ch-go
// columnar inserts and through the sink (journal on FSStorage, Snapshot per
// batch), side by side against the same server.
func BenchmarkInsert(b *testing.B) {
	addr, db := testenv.ClickHouse(b)
	ctx := context.Background()
	c := testenv.DialClickHouse(b, addr, db)
	require.NoError(b, c.Do(ctx, ch.Query{Body: fmt.Sprintf(eventsDDL, db)}))
	rows := benchRows()

	b.Run("raw-ch-go", func(b *testing.B) {
		cols := eventSchema()
		var input proto.Input
		for _, col := range cols {
			input = append(input, proto.InputColumn{Name: col.Name(), Data: chsink.RawData(col).(proto.ColInput)})
		}
		body := "INSERT INTO events (id, org, kind, at, score, tags, note) VALUES"
		b.ReportAllocs()
		start := time.Now()
		for b.Loop() {
			input.Reset()
			for i := range rows {
				chsink.AppendRaw(cols, &rows[i])
			}
			// identical blocks each round: turn deduplication off, or the server drops them
			require.NoError(b, c.Do(ctx, ch.Query{Body: body, Input: input, Settings: []ch.Setting{ch.SettingInt("insert_deduplicate", 0)}}))
		}
		b.ReportMetric(float64(b.N*benchBatch)/time.Since(start).Seconds(), "rows/s")
	})

	b.Run("raw-ch-go-token", func(b *testing.B) {
		cols := eventSchema()
		var input proto.Input
		for _, col := range cols {
			input = append(input, proto.InputColumn{Name: col.Name(), Data: chsink.RawData(col).(proto.ColInput)})
		}
		body := "INSERT INTO events (id, org, kind, at, score, tags, note) VALUES"
		var n int
		b.ReportAllocs()
		start := time.Now()
		for b.Loop() {
			input.Reset()
			for i := range rows {
				chsink.AppendRaw(cols, &rows[i])
			}
			n++
			require.NoError(b, c.Do(ctx, ch.Query{Body: body, Input: input, Settings: []ch.Setting{{Key: "insert_deduplication_token", Value: fmt.Sprintf("raw-%d-%d", time.Now().UnixNano(), n), Important: true}}}))
		}
		b.ReportMetric(float64(b.N*benchBatch)/time.Since(start).Seconds(), "rows/s")
	})

	for _, bc := range []struct {
		name     string
		newStore func(b *testing.B) checkpoint.Storage
	}{
		{"sink-fsjournal", func(b *testing.B) checkpoint.Storage {
			st, err := checkpoint.NewFSStorage(b.TempDir())
			require.NoError(b, err)
			return st
		}},
		{"sink-memjournal", func(b *testing.B) checkpoint.Storage { return checkpoint.NewMemStorage() }},
	} {
		name, newStore := bc.name, bc.newStore
		b.Run(name, func(b *testing.B) {
			store := newStore(b)
			s, err := chsink.New(ctx, chsink.Table{Addr: addr, Name: "events"}, sink.Source{Topic: name}, store, eventSchema,
				chsink.Options{Database: db, MaxRows: benchBatch})
			require.NoError(b, err)
			defer s.Close()
			var off int64
			var id checkpoint.ID
			b.ReportAllocs()
			start := time.Now()
			for b.Loop() {
				for i := range rows {
					if err := s.Add(ctx, sink.Position{Offset: off}, rows[i]); err != nil {
						b.Fatal(err)
					}
					off++
				}
				id++
				_, err := s.Snapshot(ctx, id)
				require.NoError(b, err)
				require.NoError(b, s.CheckpointCompleted(ctx, id))
			}
			b.ReportMetric(float64(b.N*benchBatch)/time.Since(start).Seconds(), "rows/s")
			b.ReportMetric(float64(chsink.BufferedBytesPerRow(s)), "B/buffered-row")
		})
	}
}
