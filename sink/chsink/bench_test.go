package chsink_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/testkit"
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
// columnar inserts and through the sink (journal on FSStorage or
// MemoryStorage), side by side against the same server. The sink runs either
// a checkpoint (Snapshot and CheckpointCompleted) per batch, where nothing
// can overlap the insert because Snapshot waits for it, or one per ten
// batches (500,000 rows, under half a second here: a checkpoint interval
// far shorter than usual), where the next batch is built while the previous
// one is journaled and inserted.
//
// Each variant writes a table of its own, dropped when it ends, so that the
// background merges of one variant's parts do not slow the next one down.
func BenchmarkInsert(b *testing.B) {
	addr, db := testkit.ClickHouse(b)
	ctx := context.Background()
	c := testkit.DialClickHouse(b, addr, db)
	tables := 0
	newTable := func(b *testing.B) string {
		tables++
		name := fmt.Sprintf("events_%d", tables)
		ddl := strings.Replace(fmt.Sprintf(eventsDDL, db), ".events (", "."+name+" (", 1)
		require.NoError(b, c.Do(ctx, ch.Query{Body: ddl}))
		b.Cleanup(func() { require.NoError(b, c.Do(ctx, ch.Query{Body: "DROP TABLE " + db + "." + name + " SYNC"})) })
		return name
	}
	rows := benchRows()

	b.Run("raw-ch-go", func(b *testing.B) {
		table := newTable(b)
		cols := eventSchema()
		var input proto.Input
		for _, col := range cols {
			input = append(input, proto.InputColumn{Name: col.Name(), Data: chsink.RawData(col).(proto.ColInput)})
		}
		body := "INSERT INTO " + table + " (id, org, kind, at, score, tags, note) VALUES"
		b.ReportAllocs()
		start, cpu := time.Now(), processCPU()
		for b.Loop() {
			input.Reset()
			for i := range rows {
				chsink.AppendRaw(cols, &rows[i])
			}
			// identical blocks each round: turn deduplication off, or the server drops them
			require.NoError(b, c.Do(ctx, ch.Query{Body: body, Input: input, Settings: []ch.Setting{ch.SettingInt("insert_deduplicate", 0)}}))
		}
		b.ReportMetric(float64(b.N*benchBatch)/time.Since(start).Seconds(), "rows/s")
		reportCPU(b, cpu)
	})

	b.Run("raw-ch-go-token", func(b *testing.B) {
		table := newTable(b)
		cols := eventSchema()
		var input proto.Input
		for _, col := range cols {
			input = append(input, proto.InputColumn{Name: col.Name(), Data: chsink.RawData(col).(proto.ColInput)})
		}
		body := "INSERT INTO " + table + " (id, org, kind, at, score, tags, note) VALUES"
		var n int
		b.ReportAllocs()
		start, cpu := time.Now(), processCPU()
		for b.Loop() {
			input.Reset()
			for i := range rows {
				chsink.AppendRaw(cols, &rows[i])
			}
			n++
			require.NoError(b, c.Do(ctx, ch.Query{Body: body, Input: input, Settings: []ch.Setting{{Key: "insert_deduplication_token", Value: fmt.Sprintf("raw-%d-%d", time.Now().UnixNano(), n), Important: true}}}))
		}
		b.ReportMetric(float64(b.N*benchBatch)/time.Since(start).Seconds(), "rows/s")
		reportCPU(b, cpu)
	})

	fsStore := func(b *testing.B) checkpoint.Storage {
		st, err := checkpoint.NewFSStorage(b.TempDir())
		require.NoError(b, err)
		return st
	}
	memStore := func(b *testing.B) checkpoint.Storage { return checkpoint.NewMemoryStorage() }
	for _, bc := range []struct {
		name     string
		newStore func(b *testing.B) checkpoint.Storage
		every    int // batches per checkpoint
	}{
		{"sink-fsjournal", fsStore, 1},
		{"sink-memjournal", memStore, 1},
		{"sink-fsjournal-ckpt10", fsStore, 10},
		{"sink-memjournal-ckpt10", memStore, 10},
	} {
		name, newStore, every := bc.name, bc.newStore, bc.every
		b.Run(name, func(b *testing.B) {
			store := newStore(b)
			s, err := chsink.New(ctx, chsink.Table{Addr: addr, Name: newTable(b)}, checkpoint.TopicPartition{Topic: name}, store, eventSchema,
				chsink.Options{Database: db, MaxRows: benchBatch})
			require.NoError(b, err)
			defer s.Close()
			var off int64
			var id checkpoint.ID
			complete := func() {
				id++
				_, err := s.Snapshot(ctx, id)
				require.NoError(b, err)
				require.NoError(b, s.CheckpointCompleted(ctx, id))
			}
			batches := 0
			b.ReportAllocs()
			start, cpu := time.Now(), processCPU()
			for b.Loop() {
				for i := range rows {
					if err := s.Add(ctx, sink.Position{Offset: off}, rows[i]); err != nil {
						b.Fatal(err)
					}
					off++
				}
				if batches++; batches%every == 0 {
					complete()
				}
			}
			if batches%every != 0 {
				complete() // every row in ClickHouse before the clock stops
			}
			b.ReportMetric(float64(b.N*benchBatch)/time.Since(start).Seconds(), "rows/s")
			b.ReportMetric(float64(chsink.BufferedBytesPerRow(s)), "B/buffered-row")
			reportCPU(b, cpu)
		})
	}
}

// reportCPU reports the CPU time the benchmark's process (the client, not
// ClickHouse) spent per batch since since: on this shared 2-core machine a
// steadier measure of the client's work than rows/s.
func reportCPU(b *testing.B, since time.Duration) {
	if now := processCPU(); now > 0 {
		b.ReportMetric(float64(now-since)/float64(time.Millisecond)/float64(b.N), "cpu-ms/batch")
	}
}
