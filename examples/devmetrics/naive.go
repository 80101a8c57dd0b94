package devmetrics

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"
	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// Naive names one of the five joints of the articles' pipeline done the
// naive way, to watch its bug beside the correct joint: make demo
// NAIVE=<joint>. Never run one for real data. The correct pipeline keeps
// running beside the naive joint, on the same deliveries and faults, so
// the demo prints both figures.
type Naive string

// The naive joints and the bug each reproduces.
const (
	// NaiveGateway claims the delivery id and answers 2xx before Kafka
	// acknowledged the event (the publish runs in the background, never
	// awaited): a publish that fails is lost, and the provider's retry or
	// redelivery is answered as a duplicate. The gateway's -naive gateway.
	NaiveGateway Naive = "gateway"
	// NaiveSink buffers rows in a plain list, flushed every
	// NaiveSinkBatch rows or when a record arrives NaiveSinkInterval after
	// the previous flush, outside the checkpoints, and drops a batch after
	// its retries: rows in the buffer when the checkpoint completes are
	// lost at a kill, rows flushed after it are written again by the
	// replay, and the end of a quiet stream never leaves the buffer. The
	// processor's -naive sink, into naive_sink_events.
	NaiveSink Naive = "sink"
	// NaiveMerge reads the ReplacingMergeTree tables without FINAL: every
	// version of a row not merged yet is counted (the partial rows of early
	// firings, each incident's transitions). A read-side bug: nothing runs
	// differently.
	NaiveMerge Naive = "merge"
	// NaiveMV inserts without deduplicate_blocks_in_dependent_materialized_views
	// (off by default before ClickHouse 26.2): a batch inserted again with
	// its token (replayed after a kill) is dropped by the table, which has
	// a deduplication window, but the view over it counts it again, and no
	// merge undoes that. The processor's -naive mv runs a second sink
	// beside the correct one, writing every event the chain counts to
	// naive_mv_events in batches a replay re-forms identically (as
	// chsink's journal does), each with its insert_deduplication_token;
	// the view mv_naive_hourly rolls them up into naive_hourly like the
	// correct rollup. chsink always sets the setting, and refuses a view
	// target without a deduplication window, so it cannot make this
	// mistake.
	NaiveMV Naive = "mv"
	// NaiveAvg is the rollup whose average review latency takes every
	// event as a sample, 0 for an event that is no review (the articles'
	// avgState(toFloat64(0)) placeholder): the average is diluted by
	// zeros. mv_naive_avg_hourly in NaiveDDL.
	NaiveAvg Naive = "avg"
)

// Naives lists the naive joints in the pipeline's order.
func Naives() []Naive { return []Naive{NaiveGateway, NaiveSink, NaiveMerge, NaiveMV, NaiveAvg} }

// ParseNaive returns the Naive named s; "" is no naive joint.
func ParseNaive(s string) (Naive, error) {
	for _, n := range Naives() {
		if string(n) == s {
			return n, nil
		}
	}
	if s == "" {
		return "", nil
	}
	return "", fmt.Errorf("devmetrics: unknown naive joint %q: want gateway, sink, merge, mv or avg", s)
}

// ParseNaives returns the Naives of a comma-separated list; "all" is every
// one, "" none.
func ParseNaives(list string) ([]Naive, error) {
	if list == "all" {
		return Naives(), nil
	}
	var out []Naive
	for _, name := range strings.Split(list, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		n, err := ParseNaive(name)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// NaiveDDL returns the statements that create what naive joint n needs
// beside the schema of DDL (none for gateway and merge).
func NaiveDDL(database string, n Naive) []string {
	var qs []string
	switch n {
	case NaiveSink:
		qs = []string{`CREATE TABLE IF NOT EXISTS %[1]s.naive_sink_events (
			org_id LowCardinality(String),
			source LowCardinality(String),
			event_id String,
			event_type LowCardinality(String),
			employee_id String,
			event_time DateTime64(3, 'UTC')
		) ENGINE = MergeTree ORDER BY (org_id, source, event_id)`}
	case NaiveMV:
		qs = []string{`CREATE TABLE IF NOT EXISTS %[1]s.naive_mv_events (
			org_id LowCardinality(String),
			source LowCardinality(String),
			event_id String,
			event_type LowCardinality(String),
			employee_id String,
			event_time DateTime64(3, 'UTC')
		) ENGINE = MergeTree ORDER BY (org_id, source, event_id)
		SETTINGS non_replicated_deduplication_window = 10000`,
			`CREATE TABLE IF NOT EXISTS %[1]s.naive_hourly (
			org_id LowCardinality(String),
			employee_id String,
			hour DateTime('UTC'),
			prs_merged AggregateFunction(sum, UInt64),
			review_comments AggregateFunction(sum, UInt64),
			deployments AggregateFunction(sum, UInt64),
			incidents AggregateFunction(sum, UInt64)
		) ENGINE = AggregatingMergeTree ORDER BY (org_id, employee_id, hour)
		SETTINGS non_replicated_deduplication_window = 10000`,
			`CREATE MATERIALIZED VIEW IF NOT EXISTS %[1]s.mv_naive_hourly TO %[1]s.naive_hourly AS
			SELECT org_id, employee_id, toStartOfHour(event_time) AS hour,
				sumState(toUInt64(event_type = 'pr.merged')) AS prs_merged,
				sumState(toUInt64(event_type = 'review.comment')) AS review_comments,
				sumState(toUInt64(event_type = 'deployment')) AS deployments,
				sumState(toUInt64(event_type = 'incident.opened')) AS incidents
			FROM %[1]s.naive_mv_events GROUP BY org_id, employee_id, hour`}
	case NaiveAvg:
		// Every event a sample: latency_s is 0 for an event that is no review.
		// The view's own table keeps every row with its block number
		// (chsink refuses a folding engine on a plain server: the naive
		// part is the average, not the storage); reads aggregate.
		qs = []string{`CREATE MATERIALIZED VIEW IF NOT EXISTS %[1]s.mv_naive_avg_hourly
			ENGINE = MergeTree ORDER BY (org_id, employee_id, hour)
			SETTINGS non_replicated_deduplication_window = 10000, enable_block_number_column = 1 AS
			SELECT org_id, employee_id, toStartOfHour(event_time) AS hour,
				avgState(toFloat64(latency_s)) AS review_latency_s
			FROM %[1]s.normalized_events GROUP BY org_id, employee_id, hour`}
	}
	for i, q := range qs {
		qs[i] = fmt.Sprintf(q, database)
	}
	return qs
}

// The naive sink's flush triggers, the first article's.
const (
	NaiveSinkBatch    = 1000
	NaiveSinkInterval = 5 * time.Second
)

// naiveSink is the first article's buffering sink, kept as its bug: not a
// checkpoint participant (a checkpoint completes with rows still in the
// buffer), a flush only when a row arrives, and a batch dropped after its
// retries ("the batch will be retried when the job restarts": it will
// not).
type naiveSink struct {
	addr, database string
	client         ch.Options
	log            *slog.Logger
	buf            []Event
	last           time.Time
}

func (s *naiveSink) add(ctx context.Context, ev Event) {
	s.buf = append(s.buf, ev)
	if s.last.IsZero() {
		s.last = time.Now()
	}
	if len(s.buf) < NaiveSinkBatch && time.Since(s.last) < NaiveSinkInterval {
		return
	}
	var err error
	for range 3 {
		if err = s.insert(ctx); err == nil {
			break
		}
	}
	if err != nil {
		s.log.Error("naive sink: retries exhausted, dropping the batch; the checkpoint won't advance, so the batch will be retried when the job restarts",
			"rows", len(s.buf), "err", err)
	}
	s.buf, s.last = s.buf[:0], time.Now()
}

func (s *naiveSink) insert(ctx context.Context) error {
	return insertEvents(ctx, s.addr, s.database, s.client, "naive_sink_events", s.buf, nil)
}

// insertEvents inserts rows into table (naive_sink_events or
// naive_mv_events) with settings.
func insertEvents(ctx context.Context, addr, database string, client ch.Options, table string, rows []Event, settings []ch.Setting) error {
	opts := client
	opts.Address, opts.Database = addr, database
	conn, err := ch.Dial(ctx, opts)
	if err != nil {
		return err
	}
	defer conn.Close()
	var (
		org, source, typ   proto.ColStr
		id, employee       proto.ColStr
		at                 = new(proto.ColDateTime64).WithPrecision(proto.PrecisionMilli)
		orgLC, srcLC, tyLC = org.LowCardinality(), source.LowCardinality(), typ.LowCardinality()
	)
	for _, ev := range rows {
		orgLC.Append(ev.OrgID)
		srcLC.Append(ev.Source)
		id.Append(ev.EventID)
		tyLC.Append(ev.Type)
		employee.Append(ev.EmployeeID)
		at.Append(ev.Time)
	}
	return conn.Do(ctx, ch.Query{
		Body:     "INSERT INTO " + table + " (org_id, source, event_id, event_type, employee_id, event_time) VALUES",
		Settings: settings,
		Input: proto.Input{{Name: "org_id", Data: orgLC}, {Name: "source", Data: srcLC}, {Name: "event_id", Data: &id},
			{Name: "event_type", Data: tyLC}, {Name: "employee_id", Data: &employee}, {Name: "event_time", Data: at}},
	})
}

// naiveViewBatch is how many Kafka offsets one batch of the naive view
// sink spans.
const naiveViewBatch = 16

// naiveViewSink writes naive_mv_events at least once, exactly as a replay
// needs: a batch holds the events of the records of naiveViewBatch
// consecutive offsets, so a replay from a checkpoint forms the same
// batches with the same tokens; the rows not inserted yet are part of
// every checkpoint. Its one mistake is the NaiveMV bug: it inserts
// without deduplicate_blocks_in_dependent_materialized_views.
type naiveViewSink struct {
	addr, database string
	client         ch.Options
	partition      int
	state          naiveViewState
	lastAdd        time.Time
}

// naiveViewState is what a checkpoint holds of it.
type naiveViewState struct {
	Batch int64   `json:"batch"` // offset / naiveViewBatch of Rows
	First int64   `json:"first"` // offsets of the first and last row
	Last  int64   `json:"last"`
	Rows  []Event `json:"rows"`
}

func (s *naiveViewSink) add(ctx context.Context, offset int64, ev Event) error {
	if b := offset / naiveViewBatch; len(s.state.Rows) > 0 && b != s.state.Batch {
		if err := s.flush(ctx); err != nil {
			return err
		}
	}
	if len(s.state.Rows) == 0 {
		s.state.Batch, s.state.First = offset/naiveViewBatch, offset
	}
	s.state.Rows, s.state.Last, s.lastAdd = append(s.state.Rows, ev), offset, time.Now()
	return nil
}

// tick flushes the last batch of a partition quiet for 3 s: the wall
// clock decides this batch's end, so a replay may cut it elsewhere (the
// demo's naive figures show the events table's rows for that reason).
func (s *naiveViewSink) tick(ctx context.Context) error {
	if len(s.state.Rows) > 0 && time.Since(s.lastAdd) > 3*time.Second {
		return s.flush(ctx)
	}
	return nil
}

func (s *naiveViewSink) flush(ctx context.Context) error {
	token := fmt.Sprintf("naive-mv-%d-%d-%d", s.partition, s.state.First, s.state.Last)
	err := insertEvents(ctx, s.addr, s.database, s.client, "naive_mv_events", s.state.Rows, []ch.Setting{
		{Key: "insert_deduplication_token", Value: token, Important: true},
		ch.SettingInt("insert_deduplicate", 1),
		ch.SettingInt("deduplicate_blocks_in_dependent_materialized_views", 0), // the bug
	})
	if err != nil {
		return fmt.Errorf("naive mv sink: %w", err)
	}
	s.state.Rows = s.state.Rows[:0]
	return nil
}

func (s *naiveViewSink) Snapshot(context.Context, checkpoint.ID) ([]byte, error) {
	return json.Marshal(s.state)
}

func (s *naiveViewSink) Restore(_ context.Context, state []byte) error {
	s.lastAdd = time.Now() // the replay comes first: no idle flush before it
	return json.Unmarshal(state, &s.state)
}

func (s *naiveViewSink) CheckpointCompleted(context.Context, checkpoint.ID) error { return nil }
