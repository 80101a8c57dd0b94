package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/audit"
	"github.com/exactlyonce/exactlyonce/audit/chaudit"
	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/checkpoint/s3storage"
	"github.com/exactlyonce/exactlyonce/dedup"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/testkit"
	"github.com/exactlyonce/exactlyonce/testkit/s3kit"
	"github.com/exactlyonce/exactlyonce/window"
)

// exec runs the command line as a user would and returns its exit status
// and outputs.
func exec(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, func(k string) string { return env[k] }, &out, &errOut)
	return code, out.String(), errOut.String()
}

// now is a bucket an hour ago: settled under any -settle below.
var hourAgo = audit.BucketOf(time.Now().Add(-time.Hour), time.Minute)

func setUpAudit(t *testing.T) (addr, db string) {
	addr, db = testkit.ClickHouse(t)
	ctx := context.Background()
	require.NoError(t, chaudit.CreateTable(ctx, ch.Options{Address: addr}, db, chaudit.DefaultTable))
	require.NoError(t, testkit.Exec(ctx, addr, db, `CREATE TABLE events (tenant String, at DateTime64(3, 'UTC'), id String) ENGINE = MergeTree ORDER BY id`))
	b := hourAgo.Format("2006-01-02 15:04:05")
	b2 := hourAgo.Add(time.Minute).Format("2006-01-02 15:04:05")
	// Two chains counted org-a's first bucket (a row written again with
	// the same count, as a replay does, and a lower one, superseded),
	// written when their bucket began, as a pipeline would.
	require.NoError(t, testkit.Exec(ctx, addr, db, fmt.Sprintf(`INSERT INTO audit_counts (stage, tenant, bucket, counter, count, written) VALUES
		('gateway.accepted', 'org-a', '%[1]s', 'audit/0', 5, '%[1]s'),
		('processor.read', 'org-a', '%[1]s', 'webhooks/0', 3, '%[1]s'), ('processor.read', 'org-a', '%[1]s', 'webhooks/1', 3, '%[1]s'),
		('processor.first_seen', 'org-a', '%[1]s', 'webhooks/0', 2, '%[1]s'), ('processor.first_seen', 'org-a', '%[1]s', 'webhooks/0', 3, '%[1]s'),
		('processor.first_seen', 'org-a', '%[1]s', 'webhooks/1', 2, '%[1]s'),
		('processor.first_seen', 'org-a', '%[1]s', 'webhooks/1', 2, '%[1]s'),
		('gateway.accepted', 'org-b', '%[2]s', 'audit/0', 2, '%[2]s'), ('processor.read', 'org-b', '%[2]s', 'webhooks/0', 2, '%[2]s'),
		('processor.first_seen', 'org-b', '%[2]s', 'webhooks/0', 2, '%[2]s')`, b, b2)))
	var rows []string
	for i := range 5 {
		rows = append(rows, fmt.Sprintf("('org-a', '%s', 'a%d')", b, i))
	}
	rows = append(rows, fmt.Sprintf("('org-b', '%s', 'b1')", b2), fmt.Sprintf("('org-b', '%s', 'b2')", b2))
	require.NoError(t, testkit.Exec(ctx, addr, db, "INSERT INTO events VALUES "+strings.Join(rows, ", ")))
	return addr, db
}

// TestAuditAgrees: the stages of every bucket agree: exit 0, every bucket
// in the table with its counts.
func TestAuditAgrees(t *testing.T) {
	addr, db := setUpAudit(t)
	code, out, errOut := exec(t, nil, "audit", "-clickhouse", addr, "-database", db, "-table", "events", "-settle", "1m")
	require.Equal(t, exitOK, code, "%s%s", out, errOut)
	assert.Contains(t, out, "2 buckets: 2 ok, 0 pending, 0 late, 0 lost, 0 duplicated")
	assert.Regexp(t, `clickhouse 26\.\S+, insert_deduplication_version "new_unified_hash"`, out)
	assert.Contains(t, out, `every sink insert sends: async_insert="0", deduplicate_blocks_in_dependent_materialized_views="1", deduplicate_insert="enable"`)
	assert.Regexp(t, `org-a\s+\S+ \S+\s+5\s+6\s+5\s+5\s+ok`, out)
}

// TestAuditFlagsLossAndDuplication: rows missing from one bucket, written
// twice in another, are flagged in their bucket: exit 1, the JSON names
// them; a young bucket that differs is pending, not a failure.
func TestAuditFlagsLossAndDuplication(t *testing.T) {
	addr, db := setUpAudit(t)
	ctx := context.Background()
	require.NoError(t, testkit.Exec(ctx, addr, db, "DELETE FROM events WHERE id = 'a3'"))
	require.NoError(t, testkit.Exec(ctx, addr, db, fmt.Sprintf("INSERT INTO events VALUES ('org-b', '%s', 'b1')", hourAgo.Add(time.Minute).Format("2006-01-02 15:04:05"))))
	young := audit.BucketOf(time.Now(), time.Minute).Format("2006-01-02 15:04:05")
	require.NoError(t, testkit.Exec(ctx, addr, db, fmt.Sprintf("INSERT INTO audit_counts (stage, tenant, bucket, counter, count) VALUES ('processor.first_seen', 'org-c', '%s', 'webhooks/0', 4)", young)))

	code, out, errOut := exec(t, nil, "audit", "-clickhouse", addr, "-database", db, "-table", "events", "-settle", "10m", "-json")
	require.Equal(t, exitDifference, code, "%s%s", out, errOut)
	var got auditOutput
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	assert.True(t, got.Failed)
	assert.Equal(t, auditSummary{OK: 0, Pending: 1, Lost: 1, Duplicated: 1}, got.Summary)
	require.NotNil(t, got.ClickHouse)
	assert.Equal(t, "enable", got.ClickHouse.Sent["deduplicate_insert"])
	assert.Equal(t, "enable", got.ClickHouse.Defaults["deduplicate_insert"], "the embedded server's default")
	assert.Contains(t, got.Findings, audit.Finding{Check: "processor.first_seen→events", Tenant: "org-a", Bucket: hourAgo, Upstream: 5, Downstream: 4, Status: audit.StatusLost})
	assert.Contains(t, got.Findings, audit.Finding{Check: "processor.first_seen→events", Tenant: "org-b", Bucket: hourAgo.Add(time.Minute), Upstream: 2, Downstream: 3, Status: audit.StatusDuplicated})

	metrics := filepath.Join(t.TempDir(), "audit.prom")
	code, out, _ = exec(t, nil, "audit", "-clickhouse", addr, "-database", db, "-table", "events", "-differences", "-metrics-file", metrics)
	assert.Equal(t, exitDifference, code)
	assert.Contains(t, out, "LOST: processor.first_seen→events org-a")
	assert.Contains(t, out, "pending", "org-c's bucket is young")
	b, err := os.ReadFile(metrics)
	require.NoError(t, err)
	assert.Contains(t, string(b), `exactlyonce_audit_buckets{status="lost"} 1`)
}

// TestAuditSinkCheck: where the sinks counted the rows they had
// acknowledged (audit.SinkStage), the verifier compares those with the
// table too, so a row lost after its acknowledgement (a part ClickHouse
// lost) is flagged on the sink's side as well as end to end; a table
// whose sink counted nothing gets no such check.
func TestAuditSinkCheck(t *testing.T) {
	addr, db := setUpAudit(t)
	ctx := context.Background()
	b, b2 := hourAgo.Format("2006-01-02 15:04:05"), hourAgo.Add(time.Minute).Format("2006-01-02 15:04:05")
	require.NoError(t, testkit.Exec(ctx, addr, db, fmt.Sprintf(`INSERT INTO audit_counts (stage, tenant, bucket, counter, count, written) VALUES
		('sink.events', 'org-a', '%[1]s', 'webhooks/0', 3, '%[1]s'), ('sink.events', 'org-a', '%[1]s', 'webhooks/1', 2, '%[1]s'),
		('sink.events', 'org-b', '%[2]s', 'webhooks/0', 2, '%[2]s')`, b, b2)))
	code, out, errOut := exec(t, nil, "audit", "-clickhouse", addr, "-database", db, "-table", "events", "-settle", "10m", "-json")
	require.Equal(t, exitOK, code, "%s%s", out, errOut)
	var got auditOutput
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	assert.Contains(t, got.Stages, "sink.events")
	assert.Equal(t, auditSummary{OK: 2}, got.Summary)

	require.NoError(t, testkit.Exec(ctx, addr, db, "DELETE FROM events WHERE id = 'a3'"))
	code, out, errOut = exec(t, nil, "audit", "-clickhouse", addr, "-database", db, "-table", "events", "-settle", "10m", "-json")
	require.Equal(t, exitDifference, code, "%s%s", out, errOut)
	got = auditOutput{}
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	assert.Contains(t, got.Findings, audit.Finding{Check: "sink.events→events", Tenant: "org-a", Bucket: hourAgo, Upstream: 5, Downstream: 4, Status: audit.StatusLost})
	assert.Contains(t, got.Findings, audit.Finding{Check: "processor.first_seen→events", Tenant: "org-a", Bucket: hourAgo, Upstream: 5, Downstream: 4, Status: audit.StatusLost})

	// Another table counted under the same rows: its sink counted
	// nothing, so it has only the first sights' check.
	code, out, errOut = exec(t, nil, "audit", "-clickhouse", addr, "-database", db, "-table", "events,as=events_again", "-settle", "10m", "-json")
	require.Equal(t, exitDifference, code, "%s%s", out, errOut)
	got = auditOutput{}
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	for _, f := range got.Findings {
		assert.NotEqual(t, "sink.events→events_again", f.Check)
	}
}

// TestAuditBadInput: an unreachable server, a database without the audit
// table, a table without the audit schema, a mistyped column, bad flags:
// exit 2 with a clear message.
func TestAuditBadInput(t *testing.T) {
	addr, db := testkit.ClickHouse(t)
	ctx := context.Background()
	require.NoError(t, testkit.Exec(ctx, addr, db, "CREATE TABLE other (x UInt8) ENGINE = MergeTree ORDER BY x"))
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unreachable", []string{"-clickhouse", "127.0.0.1:1"}, "connect to ClickHouse at 127.0.0.1:1"},
		{"no audit table", []string{"-clickhouse", addr, "-database", db}, "audit_counts does not exist"},
		{"not the audit schema", []string{"-clickhouse", addr, "-database", db, "-audit-table", "other"}, "has no column stage, tenant, bucket"},
		{"bad table flag", []string{"-clickhouse", addr, "-table", "events,tenat=x"}, `unknown part "tenat=x"`},
		{"bad until", []string{"-until", "yesterday"}, "-until"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := exec(t, nil, append([]string{"audit"}, tt.args...)...)
			assert.Equal(t, exitError, code, out)
			assert.Contains(t, errOut, tt.want)
		})
	}
	code, _, errOut := exec(t, nil, "nonsense")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, `unknown command "nonsense"`)
}

// pipeline runs a small checkpointed chain (dedup, a window, a sink, an
// audit counter and its sink) over topic into FSStorage at dir until every
// record is processed, takes a checkpoint and stops.
func pipeline(t *testing.T, brokers []string, topic string, partitions, records int, addr, db, dir string, incremental bool) {
	t.Helper()
	p := startPipeline(t, brokers, topic, addr, db, dir, incremental)
	p.await(t, records)
	p.stop(t)
}

// running is a pipeline started by startPipeline.
type running struct {
	src    *kafkasource.Source
	seen   *offsets // records processed
	cancel func()
	done   chan error
}

// await waits until the pipeline processed records records, lets a tick
// flush the audit counts and takes two checkpoints.
func (r *running) await(t *testing.T, records int) {
	t.Helper()
	require.Eventually(t, func() bool { return r.seen.count() == records }, 2*time.Minute, 20*time.Millisecond)
	time.Sleep(300 * time.Millisecond) // a tick flushes the counts
	require.NoError(t, r.src.Checkpoint(context.Background()))
	require.NoError(t, r.src.Checkpoint(context.Background()))
}

func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	require.NoError(t, <-r.done)
}

// startPipeline starts the chain of pipeline in consumer group "ops".
func startPipeline(t *testing.T, brokers []string, topic string, addr, db, dir string, incremental bool) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	storage, err := checkpoint.NewFSStorage(dir)
	require.NoError(t, err)
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: time.Hour})
	require.NoError(t, err)
	type ev struct {
		Tenant, ID string
		At         time.Time
	}
	seen := &offsets{m: map[checkpoint.TopicPartition]map[int64]bool{}}
	chain := kafkasource.Chains(store, func(ctx context.Context, c *checkpoint.Chain) (*kafkasource.Processor, error) {
		p := c.Partition()
		d, err := dedup.New(dedup.DefaultTTL, dedup.Options{Incremental: incremental})
		if err != nil {
			return nil, err
		}
		w, err := window.New(window.Tumbling(time.Minute), window.Count[string]{}, window.Options{Inputs: []int{p.Partition}})
		if err != nil {
			return nil, err
		}
		counter, err := audit.NewCounter(p.String(), audit.Options{})
		if err != nil {
			return nil, err
		}
		for name, part := range map[string]checkpoint.Participant{"dedup": d, "window": w, "audit": counter} {
			if err := c.Add(name, part); err != nil {
				return nil, err
			}
		}
		chdb := chsink.DB{Addr: addr, Database: db}
		events, err := chsink.Open(ctx, c, chdb, "events", func() []chsink.Column[ev] {
			return []chsink.Column[ev]{
				chsink.String("tenant", func(e *ev) string { return e.Tenant }),
				chsink.DateTime64("at", 3, func(e *ev) time.Time { return e.At }),
				chsink.String("id", func(e *ev) string { return e.ID }),
			}
		}, chsink.Options{})
		if err != nil {
			return nil, err
		}
		auditSink, err := chaudit.OpenSink(ctx, c, chdb, "", chsink.Options{ParticipantName: "audit_rows"})
		if err != nil {
			return nil, err
		}
		proc := &kafkasource.Processor{}
		var rows []audit.Row
		var pos []sink.Position
		var out window.Output[string, uint64]
		proc.Process = func(ctx context.Context, m kafka.Message) error {
			e := ev{Tenant: string(m.Key), ID: string(m.Value), At: m.Time}
			counter.At(m.Offset)
			counter.Add(audit.StageRead, e.Tenant, e.At, 1)
			first, err := d.Observe(dedup.AppendKey(nil, e.ID), e.At)
			if err != nil {
				return err
			}
			if first {
				counter.Add(audit.StageFirstSeen, e.Tenant, e.At, 1)
				if err := events.Add(ctx, sink.Position{Offset: m.Offset}, e); err != nil {
					return err
				}
				out.Reset()
				if err := w.Add(window.Event[string]{Input: p.Partition, Key: e.Tenant, Time: e.At, Value: e.ID}, &out); err != nil {
					return err
				}
			} else {
				counter.Add(audit.StageDuplicate, e.Tenant, e.At, 1)
			}
			seen.add(p, m.Offset)
			return nil
		}
		proc.Tick = func(ctx context.Context) error { return chaudit.Flush(ctx, counter, auditSink, &rows, &pos) }
		proc.TickInterval = 100 * time.Millisecond
		return proc, nil
	})
	src, err := kafkasource.New(kafkasource.Group{Brokers: brokers, ID: "ops", Topics: []string{topic}}, coord, chain,
		kafkasource.Options{HeartbeatInterval: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		defer coord.Close()
		done <- src.Run(ctx)
	}()
	return &running{src: src, seen: seen, cancel: cancel, done: done}
}

// offsets are the records a pipeline processed, each once however often
// a rebalance under load makes a chain replay it.
type offsets struct {
	mu sync.Mutex
	m  map[checkpoint.TopicPartition]map[int64]bool
}

func (o *offsets) add(p checkpoint.TopicPartition, offset int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m[p] == nil {
		o.m[p] = map[int64]bool{}
	}
	o.m[p][offset] = true
}

func (o *offsets) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, p := range o.m {
		n += len(p)
	}
	return n
}

// TestOperatorCommands runs a checkpointed pipeline on Kafka and
// ClickHouse, then looks at what it left with the commands: the
// checkpoints of each partition, one decoded (dedup keys and their expiry,
// open windows, the sinks' state and journals, the audit counts), the lag
// beside the checkpoints' age, verify; then damages a checkpoint and a
// journal entry, which checkpoints, verify and show report.
func TestOperatorCommands(t *testing.T) {
	for _, incremental := range []bool{false, true} {
		t.Run(fmt.Sprintf("incremental=%v", incremental), func(t *testing.T) {
			testOperatorCommands(t, incremental)
		})
	}
}

func testOperatorCommands(t *testing.T, incremental bool) {
	addr, db := testkit.ClickHouse(t)
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "ops")
	testkit.CreateTopic(t, brokers, topic, 2)
	ctx := context.Background()
	require.NoError(t, chaudit.CreateTable(ctx, ch.Options{Address: addr}, db, chaudit.DefaultTable))
	require.NoError(t, testkit.Exec(ctx, addr, db, `CREATE TABLE events (tenant String, at DateTime64(3, 'UTC'), id String)
		ENGINE = MergeTree ORDER BY id SETTINGS non_replicated_deduplication_window = 1000, enable_block_number_column = 1`))
	// A Transport of its own: kafka-go's default one answers from metadata
	// cached before this test created its topic on the shared broker.
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), RequiredAcks: kafka.RequireAll, Topic: topic, Balancer: &kafka.Hash{}, Transport: &kafka.Transport{}}
	defer w.Close()
	base := time.Now().Add(-time.Hour).Truncate(time.Minute)
	var msgs []kafka.Message
	for i := range 200 {
		id := fmt.Sprint("e", i%180) // 20 duplicates
		msgs = append(msgs, kafka.Message{Key: []byte(fmt.Sprint("org", i%4)), Value: []byte(id), Time: base.Add(time.Duration(i%180) * time.Second)})
	}
	require.NoError(t, w.WriteMessages(ctx, msgs...))
	dir := t.TempDir()
	pipeline(t, brokers, topic, 2, len(msgs), addr, db, dir, incremental)

	code, out, errOut := exec(t, nil, "checkpoints", "-state-dir", dir, "-topic", topic)
	require.Equal(t, exitOK, code, errOut)
	assert.Equal(t, 1+2*2, strings.Count(out, "\n"), "a header and two checkpoints per partition:\n%s", out)
	assert.Contains(t, out, "audit:")
	assert.Contains(t, out, "intact")

	var keys uint64
	for p := range 2 {
		code, out, errOut = exec(t, nil, "show", "-state-dir", dir, "-topic", topic, "-partition", fmt.Sprint(p), "-json")
		require.Equal(t, exitOK, code, errOut)
		var s shown
		require.NoError(t, json.Unmarshal([]byte(out), &s))
		kinds := map[string]stateInfo{}
		for _, st := range s.States {
			kinds[st.Name] = st
			assert.Empty(t, st.Error, st.Name)
		}
		require.NotNil(t, kinds["dedup"].Dedup, out)
		d := kinds["dedup"].Dedup
		keys += d.Keys
		assert.Equal(t, d.Clock.Add(dedup.DefaultTTL).Truncate(time.Second), d.LastExpiry.Truncate(time.Second))
		assert.Equal(t, incremental, len(d.Objects) > 0)
		require.NotNil(t, kinds["window"].Window)
		assert.Positive(t, kinds["window"].Window.Open)
		require.NotNil(t, kinds["events"].Sink)
		assert.Equal(t, db+".events", kinds["events"].Sink.Table)
		require.NotNil(t, kinds["audit"].Audit)
		require.Len(t, s.Journals, 2, "events and audit_counts")
		for _, j := range s.Journals {
			assert.NotEmpty(t, j.Owner)
			assert.Empty(t, j.Problems)
		}
		var first uint64
		for p := range 2 {
			_ = p
		}
		first = kinds["audit"].Audit.Stages[audit.StageFirstSeen]
		assert.Equal(t, d.Keys, first, "each first sight counted once")

		code, out, _ = exec(t, nil, "show", "-state-dir", dir, "-topic", topic, "-partition", fmt.Sprint(p))
		assert.Equal(t, exitOK, code)
		assert.Contains(t, out, "open windows of 1m0s")
		assert.Contains(t, out, "sink journal")
	}
	assert.Equal(t, uint64(180), keys, "every distinct event id in one partition's dedup")

	code, out, errOut = exec(t, nil, "lag", "-brokers", strings.Join(brokers, ","), "-group", "ops", "-topic", topic, "-state-dir", dir, "-json")
	require.Equal(t, exitOK, code, errOut)
	var lag []lagRow
	require.NoError(t, json.Unmarshal([]byte(out), &lag))
	require.Len(t, lag, 2)
	var total int64
	for _, r := range lag {
		assert.Equal(t, int64(0), r.CheckpointLag, "the last checkpoint is at the end")
		assert.Equal(t, r.HighWatermark, r.Committed)
		total += r.HighWatermark
	}
	assert.Equal(t, int64(len(msgs)), total)

	code, out, _ = exec(t, nil, "verify", "-state-dir", dir, "-topic", topic)
	require.Equal(t, exitOK, code, out)
	assert.Contains(t, out, "every checkpoint and sink journal is intact")

	// A bit flipped in partition 0's newest checkpoint, and a journal
	// entry that is no intent.
	files, err := filepath.Glob(filepath.Join(dir, checkpoint.DefaultPrefix, topic, "0", "*.ckpt"))
	require.NoError(t, err)
	require.Len(t, files, 2)
	newest := files[len(files)-1]
	b, err := os.ReadFile(newest)
	require.NoError(t, err)
	b[len(b)/2] ^= 0x40
	require.NoError(t, os.WriteFile(newest, b, 0o644))
	jdir, err := filepath.Glob(filepath.Join(dir, "sink-journal", "*events", topic, "1"))
	require.NoError(t, err)
	require.Len(t, jdir, 1)
	require.NoError(t, os.WriteFile(filepath.Join(jdir[0], "b-00000000000000000099-0000000000-00000000000000000009"), []byte("{not json"), 0o644))

	code, out, _ = exec(t, nil, "verify", "-state-dir", dir, "-topic", topic)
	assert.Equal(t, exitDifference, code, out)
	assert.Contains(t, out, "DAMAGED: checkpoint: corrupt checkpoint: checksum")
	assert.Contains(t, out, "intent b-00000000000000000099")
	assert.Contains(t, out, "2 problems")
	code, out, _ = exec(t, nil, "checkpoints", "-state-dir", dir, "-topic", topic, "-partition", "0")
	assert.Equal(t, exitOK, code)
	assert.Contains(t, out, "DAMAGED")
	code, _, _ = exec(t, nil, "show", "-state-dir", dir, "-topic", topic, "-partition", "0")
	assert.Equal(t, exitOK, code, "the newest intact one, as a restore takes")
	id := filepath.Base(newest)[:20]
	code, out, _ = exec(t, nil, "show", "-state-dir", dir, "-topic", topic, "-partition", "0", "-id", strings.TrimLeft(id, "0"))
	assert.Equal(t, exitError, code, out)

	// Read-only: nothing in the directory changed but what the test did.
	code, _, errOut = exec(t, nil, "checkpoints", "-state-dir", filepath.Join(dir, "missing"))
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "no such file or directory")
	_, err = os.Stat(filepath.Join(dir, "missing"))
	assert.True(t, os.IsNotExist(err), "a missing -state-dir is not created")
}

// TestDecodeStatesDamaged: a truncated or bit-flipped state of each kind is
// reported, never a panic.
func TestDecodeStatesDamaged(t *testing.T) {
	ctx := context.Background()
	w, err := window.New(window.Tumbling(time.Minute), window.Count[string]{}, window.Options{Inputs: []int{0}})
	require.NoError(t, err)
	var out window.Output[string, uint64]
	require.NoError(t, w.Add(window.Event[string]{Input: 0, Key: "k", Time: time.Unix(100, 0), Value: "v"}, &out))
	ws, err := w.Snapshot(ctx, 1)
	require.NoError(t, err)
	d, err := dedup.New(time.Hour, dedup.Options{})
	require.NoError(t, err)
	_, err = d.Observe([]byte("key"), time.Unix(100, 0))
	require.NoError(t, err)
	ds, err := d.Snapshot(ctx, 1)
	require.NoError(t, err)
	for name, state := range map[string][]byte{"window": ws, "dedup": ds} {
		good := decodeState(ctx, name, state, nil)
		require.Empty(t, good.Error, name)
		assert.Equal(t, name, good.Kind)
		for cut := 1; cut < len(state); cut++ {
			si := decodeState(ctx, name, state[:cut], nil)
			if si.Kind == name {
				assert.NotEmpty(t, si.Error, "%s cut at %d", name, cut)
			}
		}
		flipped := bytes.Clone(state)
		flipped[len(flipped)/2] ^= 1
		assert.Contains(t, decodeState(ctx, name, flipped, nil).Error, "checksum", name)
	}
	assert.Equal(t, uint64(1), decodeState(ctx, "dedup", ds, nil).Dedup.Keys)
	assert.Equal(t, uint64(1), decodeState(ctx, "window", ws, nil).Window.Open)
}

// TestOperatorCommandsOnS3: a processor's storage kept in an S3 bucket
// (the checkpoints and journals of a pipeline run, copied there object by
// object) reads the same through -s3-bucket, with the processor's S3
// environment; a damaged object is reported; nothing is written.
func TestOperatorCommandsOnS3(t *testing.T) {
	addr, db := testkit.ClickHouse(t)
	brokers := testkit.Kafka(t)
	s3c := s3kit.Bucket(t)
	topic := testkit.Name(t, "ops")
	testkit.CreateTopic(t, brokers, topic, 2)
	ctx := context.Background()
	require.NoError(t, chaudit.CreateTable(ctx, ch.Options{Address: addr}, db, chaudit.DefaultTable))
	require.NoError(t, testkit.Exec(ctx, addr, db, `CREATE TABLE events (tenant String, at DateTime64(3, 'UTC'), id String)
		ENGINE = MergeTree ORDER BY id SETTINGS non_replicated_deduplication_window = 1000, enable_block_number_column = 1`))
	// A Transport of its own: kafka-go's default one answers from metadata
	// cached before this test created its topic on the shared broker.
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), RequiredAcks: kafka.RequireAll, Topic: topic, Balancer: &kafka.Hash{}, Transport: &kafka.Transport{}}
	defer w.Close()
	var msgs []kafka.Message
	for i := range 50 {
		msgs = append(msgs, kafka.Message{Key: []byte(fmt.Sprint("org", i%3)), Value: []byte(fmt.Sprint("e", i)), Time: time.Now().Add(-time.Hour)})
	}
	require.NoError(t, w.WriteMessages(ctx, msgs...))
	dir := t.TempDir()
	pipeline(t, brokers, topic, 2, len(msgs), addr, db, dir, true)

	fsys, err := checkpoint.NewFSStorage(dir)
	require.NoError(t, err)
	bucket, err := s3storage.New(s3storage.NewClient(s3storage.ClientConfig{Endpoint: s3c.Endpoint, Region: s3c.Region,
		AccessKeyID: s3c.AccessKeyID, SecretAccessKey: s3c.SecretAccessKey}), s3c.Bucket, s3storage.Options{Prefix: s3c.Prefix})
	require.NoError(t, err)
	names, err := fsys.List(ctx, "")
	require.NoError(t, err)
	for _, n := range names {
		b, err := fsys.Get(ctx, n)
		require.NoError(t, err)
		require.NoError(t, bucket.Put(ctx, n, b))
	}
	env := map[string]string{"S3_ENDPOINT": s3c.Endpoint, "S3_ACCESS_KEY_ID": s3c.AccessKeyID, "S3_SECRET_ACCESS_KEY": s3c.SecretAccessKey, "S3_REGION": s3c.Region}
	s3args := []string{"-s3-bucket", s3c.Bucket, "-s3-prefix", s3c.Prefix, "-topic", topic}

	code, fromFS, _ := exec(t, nil, "show", "-state-dir", dir, "-topic", topic, "-partition", "1", "-json")
	require.Equal(t, exitOK, code)
	code, fromS3, errOut := exec(t, env, append([]string{"show", "-partition", "1", "-json"}, s3args...)...)
	require.Equal(t, exitOK, code, errOut)
	assert.JSONEq(t, fromFS, fromS3, "the same checkpoint, objects and journals through S3")
	code, out, errOut := exec(t, env, append([]string{"verify"}, s3args...)...)
	require.Equal(t, exitOK, code, out+errOut)

	newest := slices.Max(slices.DeleteFunc(slices.Clone(names), func(n string) bool { return !strings.HasSuffix(n, ".ckpt") || !strings.Contains(n, "/1/") }))
	require.NoError(t, bucket.Put(ctx, newest, []byte("EOCKPT01 not a checkpoint")))
	code, out, _ = exec(t, env, append([]string{"verify"}, s3args...)...)
	assert.Equal(t, exitDifference, code, out)
	assert.Contains(t, out, "DAMAGED")
	after, err := bucket.List(ctx, "")
	require.NoError(t, err)
	assert.Equal(t, names, after, "the commands wrote nothing")

	// rewind through S3: partition 1 back to its intact checkpoint, past
	// the damaged newest one; the journals are claimed by S3's
	// conditional writes.
	code, out, errOut = exec(t, env, append([]string{"checkpoints", "-partition", "1", "-json"}, s3args...)...)
	require.Equal(t, exitOK, code, errOut)
	var listed map[string][]ckptEntry
	require.NoError(t, json.Unmarshal([]byte(out), &listed))
	require.Len(t, listed["1"], 2)
	require.NotEmpty(t, listed["1"][0].Error, "the newest is the damaged one")
	intact := listed["1"][1]
	rewind := append([]string{"rewind", "-partition", "1", "-to", fmt.Sprint(intact.ID), "-brokers", strings.Join(brokers, ","), "-group", "ops", "-yes"}, s3args...)
	require.Eventually(t, func() bool {
		code, out, errOut = exec(t, env, rewind...)
		return code != exitRefused // the stopped pipeline's member may linger a moment
	}, 30*time.Second, 200*time.Millisecond)
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "rewound "+topic+"/1 to checkpoint")
	code, out, errOut = exec(t, env, append([]string{"checkpoints", "-partition", "1", "-json"}, s3args...)...)
	require.Equal(t, exitOK, code, errOut)
	listed = nil
	require.NoError(t, json.Unmarshal([]byte(out), &listed))
	assert.Equal(t, []ckptEntry{intact}, listed["1"])

	code, _, errOut = exec(t, map[string]string{"S3_ENDPOINT": "http://127.0.0.1:1"}, "verify", "-s3-bucket", "b", "-topic", topic)
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "127.0.0.1:1")
}
