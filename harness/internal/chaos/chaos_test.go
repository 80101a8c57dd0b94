package chaos

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/audit"
	"github.com/exactlyonce/exactlyonce/harness/internal/chaos/history"
	"github.com/exactlyonce/exactlyonce/harness/internal/demo"
	"github.com/exactlyonce/exactlyonce/internal/embedded"
	"github.com/exactlyonce/exactlyonce/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestChaos is the short chaos run of make test: every fault kind twice
// (processors killed at random, during a checkpoint write, right after a
// restart while they replay, during a rebalance; the gateway killed between
// claim and complete; Redis restarted and down; the broker killed and
// failing single produce, fetch, commit and group requests, losing
// acknowledgements, dropping connections, answering slowly; ClickHouse
// killed during an insert; processors frozen past the session timeout, at
// random and while writing a checkpoint; the transactional writer held past
// its transaction timeout and its transactional id expired; ClickHouse
// slowed; another writer in the same tables; the processors' clock
// jumping), then the S3 server holding the checkpoints killed three times.
// Each run must end with every event exactly once and every metric exact,
// after at least 20 SIGKILLs across all services, and the history checkers
// (package history) must find nothing in its history.
// "every kind" runs on kfake: seven of its kinds are kfake's wire-level
// faults (package kafkafault), which Apache Kafka has no hooks for.
// "checkpoints on S3" kills no broker and runs on Apache Kafka, the test
// binary's shared broker (testkit.Kafka, as KAFKA_BROKERS): its two
// processors share one consumer group there. Replay a failure with
// CHAOS_SEED=N go test -run TestChaos ./harness/internal/chaos.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end chaos runs of about a minute")
	}
	for _, env := range []string{"CLICKHOUSE_ADDR", "KAFKA_BROKERS", "REDIS_ADDR", "S3_ENDPOINT"} {
		if os.Getenv(env) != "" {
			t.Skipf("kills the embedded servers, and %s names your own (TestChaosOnYourServers runs on yours)", env)
		}
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("seed %d (set CHAOS_SEED to replay it)", seed)
	tests := []struct {
		name     string
		cfg      Config
		shared   bool // on testkit.Kafka's shared broker
		minKills int
		killed   []string
	}{
		{
			name:     "every kind",
			cfg:      Config{Events: 2000, FaultsPerKind: 2, Kafka: demo.KafkaFake},
			minKills: 20,
			killed:   []string{"processor", "gateway", "redis", "kafka", "clickhouse"},
		},
		{
			name: "checkpoints on S3",
			cfg: Config{Events: 1000, FaultsPerKind: 3, Checkpoints: "s3",
				Kinds: []string{KindS3Kill, KindProcessorKill, KindProcessorKillReplay}},
			shared:   true,
			minKills: 9,
			killed:   []string{"s3", "processor"},
		},
		{
			// The processors' transactional leg (a kafkasink.Sink writing
			// every record again) on Apache Kafka, under kills and pauses
			// past the session timeout: the history checks the output
			// holds each input record exactly once. (processor-pause-
			// checkpoint would pause past the sink's transaction timeout,
			// breach 1 of issue #41; the full run adds it.)
			name: "kafkasink",
			cfg: Config{Events: 1000, FaultsPerKind: 2, KafkaSink: true,
				Kinds: []string{KindProcessorKill, KindProcessorKillCheckpoint, KindProcessorPause}},
			shared:   true,
			minKills: 4,
			killed:   []string{"processor"},
		},
		{
			// A deployment's rolling restart on Apache Kafka: each instance
			// in turn, SIGTERM and one SIGKILL, while deliveries flow.
			name: "rolling restart",
			cfg: Config{Events: 1000, FaultsPerKind: 1, Instances: 3, Partitions: 6,
				Kinds: []string{KindProcessorRollingRestart}},
			shared:   true,
			minKills: 1,
			killed:   []string{"processor"},
		},
		{
			// The same under Kafka's consumer group protocol (KIP-848),
			// with kills and a pause past the session timeout: a
			// rebalance moves only some partitions, and each record still
			// counts once. A broker of its own, whose consumer-group
			// session timeout is 2 s (see demo.StartServers).
			name: "consumer protocol",
			cfg: Config{Events: 1000, FaultsPerKind: 1, Instances: 3, Partitions: 6, Kafka: demo.KafkaApache, GroupProtocol: "consumer",
				Kinds: []string{KindProcessorRollingRestart, KindProcessorKill, KindProcessorPause}},
			minKills: 2,
			killed:   []string{"processor"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.shared {
				t.Setenv("KAFKA_BROKERS", strings.Join(testkit.Kafka(t), ","))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			cfg := tt.cfg
			cfg.Seed, cfg.Dir, cfg.Stdout, cfg.Binaries = seed, t.TempDir(), testWriter{t}, binaries(t)
			cfg.JSON = filepath.Join(cfg.Dir, "chaos.json")
			cfg.History = filepath.Join(cfg.Dir, "history.jsonl")
			keepOnFailure(t, cfg.Dir, seed)
			res, err := Run(ctx, cfg)
			require.NoError(t, err)
			assert.True(t, res.Pass)
			assert.Zero(t, res.Lost, "lost events")
			assert.Zero(t, res.Duplicated, "duplicated events")
			kills := 0
			for _, n := range res.Kills {
				kills += n
			}
			assert.GreaterOrEqual(t, kills, tt.minKills, "SIGKILLs: %v", res.Kills)
			for _, s := range tt.killed {
				assert.Positive(t, res.Kills[s], "%s never killed", s)
			}
			// Every processor's log is kept, at level info, beside the
			// run's state; each restart marked.
			procLog, err := os.ReadFile(filepath.Join(cfg.Dir, "logs", "processor-0.log"))
			require.NoError(t, err)
			assert.Contains(t, string(procLog), "--- processor-0 started at ")
			assert.Contains(t, string(procLog), `"level":"INFO"`)
			require.NotEmpty(t, res.Kinds)
			for _, k := range res.Kinds {
				assert.Equal(t, cfg.FaultsPerKind, res.Faults[k].Injected, k)
			}
			// The kills that find their moment by looking (a checkpoint
			// file being written, a successor restoring, a rebalance under
			// way) must land there at least once.
			for _, k := range []string{KindProcessorKillCheckpoint, KindProcessorKillReplay, KindProcessorKillRebalance,
				KindProcessorPause, KindProcessorPauseCheckpoint, KindTxnWriterPause, KindTxnIDExpiry} {
				if f := res.Faults[k]; f != nil {
					assert.Positive(t, f.Hit, "%s never hit its moment", k)
				}
			}
			// The history was written and checked: sends, the transactional
			// writer's commits and aborts, polls, commits, final reads.
			assert.Positive(t, res.HistoryOps, "history operations")
			assert.Empty(t, res.HistoryFindings, "history checkers")
			assert.Positive(t, res.Transactions["ok"], "committed transactions")
			assert.Positive(t, res.Transactions["fail"], "aborted transactions")
			f, err := os.Open(cfg.History)
			require.NoError(t, err, "the history file")
			ops, err := history.Decode(f)
			_ = f.Close()
			require.NoError(t, err)
			if cfg.KafkaSink {
				output := 0
				for _, op := range ops {
					if op.F == history.Read && op.Value.Of == streamProcessed {
						output += len(op.Value.Keys)
					}
				}
				assert.GreaterOrEqual(t, output, res.Counted, "records of the output leg read")
			}
			_, err = os.Stat(cfg.JSON)
			assert.NoError(t, err, "the JSON result")
			// The audit, from the pipeline's own counts, agrees with the
			// ground truth: every processor first sight is in the table.
			require.NotNil(t, res.Audit, "the audit was read")
			assert.False(t, res.Audit.Failed(), "audit findings: %+v", res.Audit.Findings)
			assert.Equal(t, uint64(res.Counted), auditTotal(res.Audit, audit.StageFirstSeen))
			assert.Equal(t, uint64(res.Counted), auditTotal(res.Audit, audit.TableStage("normalized_events")))
			assert.Equal(t, uint64(res.Counted), auditTotal(res.Audit, audit.SinkStage("normalized_events")), "rows the sink acknowledged")
		})
	}
}

// auditTotal is a stage's count over every bucket of rep.
func auditTotal(rep *audit.Report, stage string) uint64 {
	var n uint64
	for _, b := range rep.Buckets {
		n += b.Counts[stage]
	}
	return n
}

// TestChaosOnYourServers runs the chaos harness as a user with servers of
// their own does: CLICKHOUSE_ADDR, KAFKA_BROKERS and REDIS_ADDR name them
// (yours if set; else servers this test starts and the harness did not,
// the broker made to behave like Kafka: dead members expire, sessions
// under 6 s are refused). The run leaves those servers alone: only the
// pipeline's own processes are killed, a kind that would kill a server is
// refused by name, and the result is exact.
func TestChaosOnYourServers(t *testing.T) {
	if testing.Short() {
		t.Skip("an end-to-end chaos run of about a minute")
	}
	own := func(env string, start func() string) {
		if os.Getenv(env) == "" {
			t.Setenv(env, start())
		}
	}
	own("CLICKHOUSE_ADDR", func() string {
		// Restarted when it exits on its own, as systemd would restart
		// yours (the embedded server aborts itself now and then).
		srv, err := embedded.StartClickHouse(context.Background(), embedded.ClickHouseOptions{Progress: os.Stderr})
		if err != nil {
			testkit.Unavailable(t, "clickhouse", err)
		}
		t.Cleanup(func() { _ = srv.Stop() })
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); demo.WatchClickHouse(ctx, srv, t.Logf) }()
		t.Cleanup(func() { stop(); <-done })
		return srv.Addr()
	})
	own("REDIS_ADDR", func() string { return testkit.Redis(t) })
	own("KAFKA_BROKERS", func() string { return strings.Join(testkit.Kafka(t), ",") })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	_, err := Run(ctx, Config{Events: 10, Kinds: []string{KindProcessorKill, KindKafkaKill}, Stdout: io.Discard})
	require.ErrorContains(t, err, "KAFKA_BROKERS", "a kind that kills your Kafka")
	_, err = Run(ctx, Config{Events: 10, Kinds: []string{KindClickHouseKill}, Stdout: io.Discard})
	require.ErrorContains(t, err, "CLICKHOUSE_ADDR")

	cfg := Config{Events: 1000, FaultsPerKind: 1, Seed: uint64(time.Now().UnixNano()),
		Dir: t.TempDir(), Stdout: testWriter{t}, Binaries: binaries(t)}
	keepOnFailure(t, cfg.Dir, cfg.Seed)
	res, err := Run(ctx, cfg)
	require.NoError(t, err, "seed %d", cfg.Seed)
	assert.True(t, res.Pass)
	assert.Zero(t, res.Lost, "lost events")
	assert.Zero(t, res.Duplicated, "duplicated events")
	assert.ElementsMatch(t, []string{KindProcessorKill, KindProcessorKillCheckpoint, KindProcessorKillReplay,
		KindProcessorKillRebalance, KindGatewayKill, KindProcessorPause, KindProcessorPauseCheckpoint, KindTxnWriterPause,
		KindClickHouseSlow, KindClickHouseWriter, KindProcessorClockJump}, res.Kinds,
		"the kinds that kill, pause or instrument only the pipeline's own processes and links")
	assert.Empty(t, res.HistoryFindings, "history checkers")
	for _, s := range []string{"kafka", "clickhouse", "redis", "s3"} {
		assert.Zero(t, res.Kills[s], "your %s was killed", s)
	}
	assert.Positive(t, res.Kills["processor"])
	assert.Positive(t, res.Kills["gateway"])
}

// TestChaosTableSaysWhatWasNotVerified: a run that stopped before the
// comparison (the last 1 M-event run, on its GitHub deadline) printed
// "lost: 0, duplicated: 0" and an empty fault table, which read as a pass.
func TestChaosTableSaysWhatWasNotVerified(t *testing.T) {
	var b strings.Builder
	r := &Result{Seed: 7, Faults: map[string]*FaultCount{KindProcessorKill: {Injected: 200, Hit: 200}}}
	r.printTable(&b)
	assert.Contains(t, b.String(), "NOT VERIFIED")
	assert.NotContains(t, b.String(), "lost: 0")
	assert.Contains(t, b.String(), "processor-kill       200")

	b.Reset()
	r.Verified = true
	r.printTable(&b)
	assert.Contains(t, b.String(), "lost: 0, duplicated: 0")
}

// TestChaosFailsOnHistoryFinding: a history checker's finding fails the
// run, however exact the counts, and the table says which checker found
// what.
func TestChaosFailsOnHistoryFinding(t *testing.T) {
	send := func(key string, typ history.Type) history.Op {
		return history.Op{Process: "jira", Type: typ, F: history.Send, Value: history.Value{Table: streamWebhooks, Key: key}}
	}
	clean := []history.Op{send("jira/1", history.Invoke), send("jira/1", history.OK),
		{Process: "verifier", Type: history.OK, F: history.Read, Value: history.Value{Table: "clickhouse.normalized_events", Of: streamWebhooks, Keys: []string{"jira/1", otherKey + "x"}}}}
	r := &Result{Seed: 7, Pass: true, Verified: true}
	r.judgeHistory(clean, "webhooks")
	assert.True(t, r.Pass, "%v", r.Differences)
	assert.Empty(t, r.HistoryFindings)

	lost := append([]history.Op{send("jira/2", history.Invoke), send("jira/2", history.OK)}, clean...)
	r = &Result{Seed: 7, Pass: true, Verified: true}
	r.judgeHistory(lost, "webhooks")
	assert.False(t, r.Pass)
	require.Len(t, r.HistoryFindings, 1)
	assert.Equal(t, history.Lost, r.HistoryFindings[0].Checker)
	assert.Contains(t, r.Differences, "history: lost: clickhouse.normalized_events jira/2: acknowledged write to webhooks not in the final read")
	var b strings.Builder
	r.printTable(&b)
	assert.Contains(t, b.String(), "FOUND lost 1")
}
