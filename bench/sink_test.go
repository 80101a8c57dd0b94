package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"
	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// envBatchRows changes the rows per insert (default 50,000, as in
// sink/chsink's BenchmarkInsert).
const envBatchRows = "BENCH_BATCH_ROWS"

// event is the row of the comparison: the columns of sink/chsink's own
// benchmarks (an id, two strings, a timestamp, a float, an array, a
// nullable).
type event struct {
	ID    uint64
	Org   string
	Kind  string
	At    time.Time
	Score float64
	Tags  []string
	Note  proto.Nullable[string]
}

const ddl = `CREATE TABLE %s.%s (
	id UInt64, org String, kind LowCardinality(String), at DateTime64(3),
	score Float64, tags Array(String), note Nullable(String)
) ENGINE = MergeTree ORDER BY id SETTINGS non_replicated_deduplication_window = 1000, enable_block_number_column = 1`

const columns = "id, org, kind, at, score, tags, note"

func schema() []chsink.Column[event] {
	return []chsink.Column[event]{
		chsink.UInt64("id", func(e *event) uint64 { return e.ID }),
		chsink.String("org", func(e *event) string { return e.Org }),
		chsink.LowCardinality("kind", func(e *event) string { return e.Kind }),
		chsink.DateTime64("at", proto.PrecisionMilli, func(e *event) time.Time { return e.At }),
		chsink.Float64("score", func(e *event) float64 { return e.Score }),
		chsink.Array("tags", new(proto.ColStr), func(e *event) []string { return e.Tags }),
		chsink.Nullable("note", new(proto.ColStr), func(e *event) proto.Nullable[string] { return e.Note }),
	}
}

func batchRows(b *testing.B) int {
	if v := os.Getenv(envBatchRows); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("%s=%q: want a positive number", envBatchRows, v)
		}
		return n
	}
	return 50_000
}

// rows returns one batch of rows; batch k of a run shifts every id by
// k*len(rows) (next), so that every insert is a block of its own and none
// is dropped by the table's deduplication, whichever client sends it.
func rows(n int) []event {
	kinds := []string{"push", "pr.merged", "issue"}
	out := make([]event, n)
	for i := range out {
		out[i] = event{
			ID: uint64(i), Org: fmt.Sprintf("org-%d", i%50), Kind: kinds[i%3],
			At: time.UnixMilli(1_700_000_000_000 + int64(i)).UTC(), Score: float64(i), Tags: []string{"a", "b"},
		}
		if i%4 == 0 {
			out[i].Note = proto.NewNullable("note")
		}
	}
	return out
}

func next(rs []event) {
	for i := range rs {
		rs[i].ID += uint64(len(rs))
	}
}

// server is the ClickHouse of the benchmark: a dedicated embedded server
// whose CPU time can be read from /proc, or $CLICKHOUSE_ADDR (then without
// the server's CPU).
func server(b *testing.B) (addr string, pid int) {
	if os.Getenv(testkit.EnvClickHouseAddr) != "" {
		addr, _ := testkit.ClickHouse(b)
		return addr, 0
	}
	srv := testkit.StartClickHouse(b)
	return srv.Addr(), srv.PID()
}

// meter reads what a variant cost: the benchmark process's CPU and
// allocations, and the ClickHouse process's CPU.
type meter struct {
	pid     int
	start   time.Time
	cpu     time.Duration
	chCPU   time.Duration
	mallocs uint64
	bytes   uint64
}

func startMeter(pid int) *meter {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return &meter{pid: pid, start: time.Now(), cpu: selfCPU(), chCPU: procCPU(pid), mallocs: ms.Mallocs, bytes: ms.TotalAlloc}
}

func (m *meter) report(b *testing.B, rows int) {
	elapsed := time.Since(m.start)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	n := float64(rows)
	b.ReportMetric(n/elapsed.Seconds(), "rows/s")
	b.ReportMetric(float64(ms.Mallocs-m.mallocs)/n, "allocs/row")
	b.ReportMetric(float64(ms.TotalAlloc-m.bytes)/n, "B/row")
	b.ReportMetric(float64(selfCPU()-m.cpu)/float64(time.Microsecond)*1000/n, "client-cpu-ns/row")
	if m.pid > 0 {
		b.ReportMetric(float64(procCPU(m.pid)-m.chCPU)/float64(time.Microsecond)*1000/n, "ch-cpu-ns/row")
	}
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU returns the user and system time of process pid from
// /proc/<pid>/stat (fields 14 and 15, in clock ticks of 1/100 s, the
// USER_HZ of Linux on x86-64), or 0 when it cannot be read.
func procCPU(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces; fields after it follow
	// the last ')'.
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// BenchmarkSinkVsClickHouseGo inserts the same batches into the same
// server through the exactly-once sink (journal, token, pipelining, one
// checkpoint per batch), through clickhouse-go v2's batch API (row by row
// with Append, and column by column), and through raw ch-go columns (the
// floor: no journal, no token). Each variant writes a table of its own,
// dropped afterwards, so one variant's merges do not slow the next. One
// op is one batch; rows/s, allocs/row and the CPU of both processes per
// row are reported.
func BenchmarkSinkVsClickHouseGo(b *testing.B) {
	addr, pid := server(b)
	db := testkit.NewDatabase(b, addr)
	ctx := context.Background()
	n := batchRows(b)
	tables := 0
	newTable := func(b *testing.B) string {
		tables++
		name := fmt.Sprintf("events_%d", tables)
		if err := testkit.Exec(ctx, addr, db, fmt.Sprintf(ddl, db, name)); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = testkit.Exec(ctx, addr, db, "DROP TABLE "+db+"."+name+" SYNC") })
		return name
	}

	b.Run("raw-ch-go", func(b *testing.B) {
		table := newTable(b)
		c := testkit.DialClickHouse(b, addr, db)
		rs := rows(n)
		var (
			id    proto.ColUInt64
			org   proto.ColStr
			kind  = proto.NewLowCardinality[string](new(proto.ColStr))
			at    = new(proto.ColDateTime64).WithPrecision(proto.PrecisionMilli)
			score proto.ColFloat64
			tags  = proto.NewArray[string](new(proto.ColStr))
			note  = proto.NewColNullable[string](new(proto.ColStr))
		)
		input := proto.Input{
			{Name: "id", Data: &id}, {Name: "org", Data: &org}, {Name: "kind", Data: kind}, {Name: "at", Data: at},
			{Name: "score", Data: &score}, {Name: "tags", Data: tags}, {Name: "note", Data: note},
		}
		body := "INSERT INTO " + table + " (" + columns + ") VALUES"
		b.ReportAllocs()
		m := startMeter(pid)
		for b.Loop() {
			next(rs)
			input.Reset()
			for i := range rs {
				r := &rs[i]
				id.Append(r.ID)
				org.Append(r.Org)
				kind.Append(r.Kind)
				at.Append(r.At)
				score.Append(r.Score)
				tags.Append(r.Tags)
				note.Append(r.Note)
			}
			if err := c.Do(ctx, ch.Query{Body: body, Input: input}); err != nil {
				b.Fatal(err)
			}
		}
		m.report(b, b.N*n)
	})

	for _, v := range []struct {
		name  string
		store func(b *testing.B) checkpoint.Storage
	}{
		{"chsink-fsjournal", func(b *testing.B) checkpoint.Storage {
			st, err := checkpoint.NewFSStorage(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			return st
		}},
		{"chsink-memjournal", func(*testing.B) checkpoint.Storage { return checkpoint.NewMemoryStorage() }},
	} {
		b.Run(v.name, func(b *testing.B) {
			table := newTable(b)
			s, err := chsink.New(ctx, chsink.Table{Addr: addr, Name: table}, checkpoint.TopicPartition{Topic: "events"},
				v.store(b), schema, chsink.Options{Database: db, MaxRows: n})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			rs := rows(n)
			var off int64
			var id checkpoint.ID
			b.ReportAllocs()
			m := startMeter(pid)
			for b.Loop() {
				next(rs)
				for i := range rs {
					if err := s.Add(ctx, sink.Position{Offset: off}, rs[i]); err != nil {
						b.Fatal(err)
					}
					off++
				}
				id++
				if _, err := s.Snapshot(ctx, id); err != nil {
					b.Fatal(err)
				}
				if err := s.CheckpointCompleted(ctx, id); err != nil {
					b.Fatal(err)
				}
			}
			m.report(b, b.N*n)
		})
	}

	dialGo := func(b *testing.B) clickhouse.Conn {
		conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}, Auth: clickhouse.Auth{Database: db}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = conn.Close() })
		return conn
	}

	b.Run("clickhouse-go-append", func(b *testing.B) {
		table := newTable(b)
		conn := dialGo(b)
		rs := rows(n)
		query := "INSERT INTO " + table + " (" + columns + ")"
		b.ReportAllocs()
		m := startMeter(pid)
		for b.Loop() {
			next(rs)
			batch, err := conn.PrepareBatch(ctx, query)
			if err != nil {
				b.Fatal(err)
			}
			for i := range rs {
				r := &rs[i]
				var note *string
				if r.Note.Set {
					note = &r.Note.Value
				}
				if err := batch.Append(r.ID, r.Org, r.Kind, r.At, r.Score, r.Tags, note); err != nil {
					b.Fatal(err)
				}
			}
			if err := batch.Send(); err != nil {
				b.Fatal(err)
			}
		}
		m.report(b, b.N*n)
	})

	b.Run("clickhouse-go-columnar", func(b *testing.B) {
		table := newTable(b)
		conn := dialGo(b)
		rs := rows(n)
		query := "INSERT INTO " + table + " (" + columns + ")"
		var (
			id    = make([]uint64, n)
			org   = make([]string, n)
			kind  = make([]string, n)
			at    = make([]time.Time, n)
			score = make([]float64, n)
			tags  = make([][]string, n)
			note  = make([]*string, n)
		)
		b.ReportAllocs()
		m := startMeter(pid)
		for b.Loop() {
			next(rs)
			batch, err := conn.PrepareBatch(ctx, query)
			if err != nil {
				b.Fatal(err)
			}
			for i := range rs {
				r := &rs[i]
				id[i], org[i], kind[i], at[i], score[i], tags[i], note[i] = r.ID, r.Org, r.Kind, r.At, r.Score, r.Tags, nil
				if r.Note.Set {
					note[i] = &r.Note.Value
				}
			}
			for c, col := range []any{id, org, kind, at, score, tags, note} {
				if err := batch.Column(c).Append(col); err != nil {
					b.Fatal(err)
				}
			}
			if err := batch.Send(); err != nil {
				b.Fatal(err)
			}
		}
		m.report(b, b.N*n)
	})
}
