package chaudit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"

	"github.com/exactlyonce/exactlyonce/audit"
	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
)

// DefaultTable is the audit table's name.
const DefaultTable = "audit_counts"

// ErrSchema is wrapped by the error of a query on a table that lacks the
// columns it needs (not the audit table, or a column name mistyped).
var ErrSchema = errors.New("chaudit: table does not have the expected columns")

// DDL returns the statement that creates the audit table name in database.
func DDL(database, name string) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s (
	stage LowCardinality(String),
	tenant String,
	bucket DateTime64(3, 'UTC'),
	counter LowCardinality(String),
	count UInt64,
	written DateTime64(3, 'UTC') DEFAULT now64(3)
) ENGINE = ReplacingMergeTree(count)
ORDER BY (tenant, bucket, stage, counter)
SETTINGS non_replicated_deduplication_window = 10000`, ident(database), ident(name))
}

// CreateTable creates the audit table (and its database) if missing.
func CreateTable(ctx context.Context, opts ch.Options, database, name string) error {
	c, err := dial(ctx, opts)
	if err != nil {
		return err
	}
	defer c.Close()
	for _, q := range []string{"CREATE DATABASE IF NOT EXISTS " + ident(database), DDL(database, name)} {
		if err := c.Do(ctx, ch.Query{Body: q}); err != nil {
			return fmt.Errorf("chaudit: create the audit table: %w", err)
		}
	}
	return nil
}

// Schema maps audit.Row to the audit table's columns, for chsink.
func Schema() []chsink.Column[audit.Row] {
	return []chsink.Column[audit.Row]{
		chsink.LowCardinality("stage", func(r *audit.Row) string { return r.Stage }),
		chsink.String("tenant", func(r *audit.Row) string { return r.Tenant }),
		chsink.DateTime64("bucket", proto.PrecisionMilli, func(r *audit.Row) time.Time { return r.Bucket }),
		chsink.LowCardinality("counter", func(r *audit.Row) string { return r.Counter }),
		chsink.UInt64("count", func(r *audit.Row) uint64 { return r.Count }),
	}
}

// OpenSink opens, in chain c, the sink of the chain's Counter rows into
// the audit table (table in db, DefaultTable when empty), registered under
// opts.ParticipantName (default: the table's name), as chsink.Open does.
// It takes chsink.MismatchReinsert, whatever opts says: a Counter flushes
// on Ticks, whose positions move on replay, and its rows are idempotent in
// the ReplacingMergeTree.
func OpenSink(ctx context.Context, c *checkpoint.Chain, db chsink.DB, table string, opts chsink.Options) (*chsink.Sink[audit.Row], error) {
	if table == "" {
		table = DefaultTable
	}
	opts.OnMismatch = chsink.MismatchReinsert
	return chsink.Open(ctx, c, db, table, Schema, opts)
}

// ComparisonQuery returns the one query that puts the stages side by side
// per tenant and bucket, from..to, as the package doc shows.
func ComparisonQuery(database, table string, stages []string, from, to time.Time) string {
	var cols []string
	for _, s := range stages {
		cols = append(cols, fmt.Sprintf("sumIf(c, stage = %s) AS %s", quote(s), ident(s)))
	}
	return fmt.Sprintf(`SELECT tenant, bucket, %s
FROM (SELECT stage, tenant, bucket, counter, max(count) AS c FROM %s.%s
      WHERE bucket >= %s AND bucket < %s GROUP BY stage, tenant, bucket, counter)
GROUP BY tenant, bucket ORDER BY tenant, bucket`, strings.Join(cols, ", "), ident(database), ident(table), timeLit(from), timeLit(to))
}

func dial(ctx context.Context, opts ch.Options) (*ch.Client, error) {
	if opts.DialTimeout == 0 {
		opts.DialTimeout = 10 * time.Second
	}
	c, err := ch.Dial(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("chaudit: connect to ClickHouse at %s: %w", opts.Address, err)
	}
	return c, nil
}

// checkColumns returns an error wrapping ErrSchema unless database.table
// has every column of want.
func checkColumns(ctx context.Context, c *ch.Client, database, table string, want []string) error {
	var name proto.ColStr
	var have []string
	err := c.Do(ctx, ch.Query{
		Body:   fmt.Sprintf("SELECT name FROM system.columns WHERE database = %s AND table = %s", quote(database), quote(table)),
		Result: proto.Results{{Name: "name", Data: &name}},
		OnResult: func(context.Context, proto.Block) error {
			for i := range name.Rows() {
				have = append(have, name.Row(i))
			}
			return nil
		},
	})
	if err != nil {
		return fmt.Errorf("chaudit: read the columns of %s.%s: %w", database, table, err)
	}
	if len(have) == 0 {
		return fmt.Errorf("%w: table %s.%s does not exist", ErrSchema, database, table)
	}
	var missing []string
	for _, w := range want {
		if !slices.Contains(have, w) {
			missing = append(missing, w)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: table %s.%s has no column %s (it has %s)", ErrSchema, database, table,
			strings.Join(missing, ", "), strings.Join(have, ", "))
	}
	return nil
}

// Totals reads every stage's total per tenant and bucket from..to (bucket
// starts) from the audit table: the largest count of each counter, summed
// over the counters, and when that count was first written.
func Totals(ctx context.Context, opts ch.Options, database, table string, from, to time.Time) ([]audit.Total, error) {
	if table == "" {
		table = DefaultTable
	}
	c, err := dial(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := checkColumns(ctx, c, database, table, []string{"stage", "tenant", "bucket", "counter", "count", "written"}); err != nil {
		return nil, err
	}
	var (
		stage, tenant proto.ColStr
		bucket, upd   proto.ColInt64
		count         proto.ColUInt64
		out           []audit.Total
	)
	q := fmt.Sprintf(`SELECT CAST(stage, 'String') AS s, tenant, toInt64(toUnixTimestamp64Milli(bucket)) AS b,
	sum(c) AS n, toInt64(toUnixTimestamp64Milli(max(w))) AS u
FROM (SELECT stage, tenant, bucket, counter, max(count) AS c, argMax(w0, count) AS w
      FROM (SELECT stage, tenant, bucket, counter, count, min(written) AS w0 FROM %s.%s
            WHERE bucket >= %s AND bucket < %s GROUP BY stage, tenant, bucket, counter, count)
      GROUP BY stage, tenant, bucket, counter)
GROUP BY s, tenant, bucket ORDER BY tenant, b, s`, ident(database), ident(table), timeLit(from), timeLit(to))
	err = c.Do(ctx, ch.Query{
		Body: q,
		Result: proto.Results{{Name: "s", Data: &stage}, {Name: "tenant", Data: &tenant},
			{Name: "b", Data: &bucket}, {Name: "n", Data: &count}, {Name: "u", Data: &upd}},
		OnResult: func(context.Context, proto.Block) error {
			for i := range stage.Rows() {
				out = append(out, audit.Total{
					Key:   audit.Key{Stage: stage.Row(i), Tenant: tenant.Row(i), Bucket: time.UnixMilli(bucket[i]).UTC()},
					Count: count[i], Updated: time.UnixMilli(upd[i]).UTC(),
				})
			}
			return nil
		},
	})
	if err != nil {
		return nil, fmt.Errorf("chaudit: read the audit table %s.%s: %w", database, table, err)
	}
	return out, nil
}

// Source is a user's table whose rows the verifier counts per tenant and
// bucket, as stage audit.TableStage(Table).
type Source struct {
	Table string
	// Tenant and Time are the columns (or expressions) of the row's tenant
	// and event time. Defaults "tenant" and "at".
	Tenant, Time string
	// Count is the expression of a bucket's count. Default "count()"; for
	// a rollup, e.g. "sumMerge(events)".
	Count string
	// Final reads the table with FINAL (a ReplacingMergeTree whose rows
	// are written again, versioned).
	Final bool
	// Columns are the columns the expressions need, checked before the
	// query (default Tenant and Time).
	Columns []string
	// Vs is the stage the table's counts must equal (Check). Default
	// audit.StageFirstSeen: one row per event the processor passed on.
	Vs string
	// As names the counts' stage, audit.TableStage(As), instead of the
	// table's name: to count one table two ways.
	As string
}

// Stage is the stage of the table's counts.
func (s Source) Stage() string {
	if s.As != "" {
		return audit.TableStage(s.As)
	}
	return audit.TableStage(s.Table)
}

// Check is the comparison of src's counts with its Vs stage.
func (s Source) Check() audit.Check {
	vs := s.Vs
	if vs == "" {
		vs = audit.StageFirstSeen
	}
	return audit.Check{Name: vs + "→" + strings.TrimPrefix(s.Stage(), "clickhouse."), Upstream: vs, Downstream: s.Stage()}
}

// SinkCheck is the comparison of the rows src's sink acknowledged
// (audit.SinkStage) with the rows counted in the table; ok is false for a
// source that does not count rows (Count or As set), which has no such
// check.
func (s Source) SinkCheck() (c audit.Check, ok bool) {
	if s.Count != "" || s.As != "" {
		return audit.Check{}, false
	}
	return audit.SinkCheck(s.Table), true
}

// ParseSource reads a Source from the verifier's -table flag:
// name[,tenant=col][,time=col][,count=expr][,final][,vs=stage][,as=name]. An
// expression may not hold a comma.
func ParseSource(s string) (Source, error) {
	parts := strings.Split(s, ",")
	src := Source{Table: strings.TrimSpace(parts[0])}
	if src.Table == "" {
		return src, fmt.Errorf("chaudit: table %q: no name", s)
	}
	for _, p := range parts[1:] {
		k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
		switch k {
		case "tenant":
			src.Tenant = v
		case "time":
			src.Time = v
		case "count":
			src.Count = v
		case "final":
			src.Final = true
		case "vs":
			src.Vs = v
		case "as":
			src.As = v
		default:
			return src, fmt.Errorf("chaudit: table %q: unknown part %q: want tenant=, time=, count=, final, vs= or as=", s, p)
		}
	}
	return src, nil
}

func (s *Source) defaults() {
	if s.Tenant == "" {
		s.Tenant = "tenant"
	}
	if s.Time == "" {
		s.Time = "at"
	}
	if s.Count == "" {
		s.Count = "count()"
	}
	if s.Columns == nil {
		for _, c := range []string{s.Tenant, s.Time} {
			if isIdent(c) {
				s.Columns = append(s.Columns, c)
			}
		}
	}
}

func isIdent(s string) bool {
	for i, r := range s {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return s != ""
}

// TableCounts counts src's rows per tenant and bucket of width, for event
// times from..to, as totals of stage src.Stage().
func TableCounts(ctx context.Context, opts ch.Options, database string, src Source, width time.Duration, from, to time.Time) ([]audit.Total, error) {
	src.defaults()
	c, err := dial(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := checkColumns(ctx, c, database, src.Table, src.Columns); err != nil {
		return nil, err
	}
	final := ""
	if src.Final {
		final = " FINAL"
	}
	var (
		tenant proto.ColStr
		bucket proto.ColInt64
		count  proto.ColUInt64
		out    []audit.Total
	)
	at := "toDateTime64(" + src.Time + ", 3, 'UTC')"
	q := fmt.Sprintf(`SELECT CAST(toString(%s), 'String') AS t, toInt64(toUnixTimestamp(toStartOfInterval(%s, INTERVAL %d SECOND))) * 1000 AS b, toUInt64(%s) AS n
FROM %s.%s%s WHERE %s >= %s AND %s < %s GROUP BY t, b ORDER BY t, b`,
		src.Tenant, at, int64(width/time.Second), src.Count, ident(database), ident(src.Table), final,
		at, timeLit(from), at, timeLit(to))
	stage := src.Stage()
	err = c.Do(ctx, ch.Query{
		Body:   q,
		Result: proto.Results{{Name: "t", Data: &tenant}, {Name: "b", Data: &bucket}, {Name: "n", Data: &count}},
		OnResult: func(context.Context, proto.Block) error {
			for i := range tenant.Rows() {
				out = append(out, audit.Total{Key: audit.Key{Stage: stage, Tenant: tenant.Row(i), Bucket: time.UnixMilli(bucket[i]).UTC()}, Count: count[i]})
			}
			return nil
		},
	})
	if err != nil {
		return nil, fmt.Errorf("chaudit: count the rows of %s.%s: %w", database, src.Table, err)
	}
	return out, nil
}

func timeLit(t time.Time) string {
	return fmt.Sprintf("fromUnixTimestamp64Milli(toInt64(%d), 'UTC')", t.UnixMilli())
}

func quote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

func ident(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }
