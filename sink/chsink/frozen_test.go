package chsink_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/testkit"
	"github.com/exactlyonce/exactlyonce/testkit/s3kit"
)

// envFrozenRuns sets how many times TestFrozenOwnerIsFenced runs its
// scenario in a row (default 1).
const envFrozenRuns = "EXACTLYONCE_FROZEN_RUNS"

// envFrozenChild, set to a JSON frozenConfig, makes TestFrozenOwnerChild a
// processor process.
const envFrozenChild = "EXACTLYONCE_FROZEN_CHILD"

const (
	frozenPartitions = 4
	frozenSession    = time.Second
)

type frozenConfig struct {
	Brokers            []string
	Topic, Group       string
	CHAddr, Database   string
	S3                 s3kit.Config
	CheckpointInterval time.Duration
	FreezeFile         string // see runFrozenProcessor
}

type frozenRow struct {
	ID        uint64
	Partition int32
	Offset    int64
}

func frozenSchema() []chsink.Column[frozenRow] {
	return []chsink.Column[frozenRow]{
		chsink.UInt64("id", func(r *frozenRow) uint64 { return r.ID }),
		chsink.Int32("partition", func(r *frozenRow) int32 { return r.Partition }),
		chsink.Int64("offset", func(r *frozenRow) int64 { return r.Offset }),
	}
}

// TestFrozenOwnerIsFenced is the multi-machine test of issue 12: two
// processor processes, each with its own local directories, share only the
// S3 bucket (checkpoints and sink journals), Kafka (the test binary's
// shared broker, Apache Kafka by default: it is never killed here) and
// ClickHouse. One is frozen with SIGSTOP past its group session
// timeout while records keep coming, the other takes its partitions over and
// inserts, then the frozen one resumes with SIGCONT. It must be fenced:
// every record is in the table and in its materialized view exactly once,
// and every partition's committed offset reaches the end of the log.
// EXACTLYONCE_FROZEN_RUNS runs it several times in a row.
func TestFrozenOwnerIsFenced(t *testing.T) {
	runs := 1
	if v := os.Getenv(envFrozenRuns); v != "" {
		var err error
		runs, err = strconv.Atoi(v)
		require.NoError(t, err, envFrozenRuns)
	}
	addr, _ := testkit.ClickHouse(t)
	// The kit's broker accepts sessions down to 100 ms (frozenSession is 1 s).
	brokers := testkit.Kafka(t)
	bucket := s3kit.Bucket(t)
	for run := range runs {
		t.Run(fmt.Sprintf("run%02d", run), func(t *testing.T) {
			s3 := bucket
			s3.Prefix += fmt.Sprintf("run%02d/", run)
			frozenRun(t, addr, brokers, s3, run)
		})
	}
}

func frozenRun(t *testing.T, addr string, brokers []string, s3 s3kit.Config, run int) {
	ctx := context.Background()
	db := testkit.NewDatabase(t, addr)
	env := chEnv{addr: addr, db: db, conn: testkit.DialClickHouse(t, addr, db)}
	env.exec(t, "CREATE TABLE "+db+".events (id UInt64, partition Int32, offset Int64) ENGINE = MergeTree ORDER BY id SETTINGS non_replicated_deduplication_window = 1000, enable_block_number_column = 1")
	env.exec(t, "CREATE TABLE "+db+".per_partition (partition Int32, n UInt64) ENGINE = MergeTree ORDER BY partition SETTINGS enable_block_number_column = 1, non_replicated_deduplication_window = 1000")
	env.exec(t, "CREATE MATERIALIZED VIEW "+db+".per_partition_mv TO "+db+".per_partition AS SELECT partition, count() AS n FROM "+db+".events GROUP BY partition")
	topic := fmt.Sprintf("frozen-%d-%d", run, time.Now().UnixNano())
	testkit.CreateTopic(t, brokers, topic, frozenPartitions)
	cfg := frozenConfig{Brokers: brokers, Topic: topic, Group: topic + "-g", CHAddr: addr, Database: db,
		S3: s3, CheckpointInterval: 200 * time.Millisecond}

	// A transport of its own: the default one's metadata predates the
	// topic on a shared broker.
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, Balancer: &kafka.Hash{},
		RequiredAcks: kafka.RequireAll, BatchTimeout: 2 * time.Millisecond, Transport: &kafka.Transport{}}
	defer w.Close()
	var sentN atomic.Int64
	produce := func(n int) {
		from := int(sentN.Load())
		msgs := make([]kafka.Message, n)
		for i := range msgs {
			id := strconv.Itoa(from + i)
			msgs[i] = kafka.Message{Key: []byte(id), Value: []byte(id)}
		}
		for attempt := 0; ; attempt++ {
			err := w.WriteMessages(ctx, msgs...)
			if err == nil {
				break
			}
			// A topic just created may not be in the writer's metadata yet.
			if !errors.Is(err, kafka.UnknownTopicOrPartition) || attempt == 50 {
				require.NoError(t, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		sentN.Add(int64(n))
	}
	rows := func() uint64 { return env.count(t, "SELECT count() FROM "+db+".events") }
	waitFor := func(what string, d time.Duration, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(d)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("run %d: timed out waiting for %s (rows %d of %d sent)", run, what, rows(), sentN.Load())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	a := startFrozenProc(t, "a", cfg)
	b := startFrozenProc(t, "b", cfg)
	produce(400)
	waitFor("both processors to own partitions and insert everything", 30*time.Second, func() bool {
		return len(a.lines("chain ")) > 0 && len(b.lines("chain ")) > 0 && rows() == uint64(sentN.Load())
	})

	// Freeze a while records keep coming, so it holds buffered rows and
	// batches in flight; b takes its partitions once its session expires.
	// Records keep coming until a has frozen (at least 20 rounds): on a
	// loaded machine a may see the freeze file only after a fixed number
	// of rounds is over, and then has no batch left to freeze at.
	bChains := len(b.lines("chain "))
	var prod sync.WaitGroup
	var frozen atomic.Bool
	prod.Go(func() {
		for i := 0; i < 20 || (!frozen.Load() && i < 800); i++ {
			produce(20)
			time.Sleep(25 * time.Millisecond)
		}
	})
	freezeAt := []string{"record", "insert"}[run%2]
	require.NoError(t, os.WriteFile(a.freezeFile, []byte(freezeAt), 0o644))
	waitFor("a to freeze itself before journaling a batch", 20*time.Second, func() bool {
		return len(a.lines("freezing ")) > 0
	})
	frozen.Store(true)
	prod.Wait()
	waitFor("b to take a's partitions and insert everything", 30*time.Second, func() bool {
		return len(b.lines("chain ")) > bChains && rows() == uint64(sentN.Load())
	})

	// a resumes: whatever it had buffered or in flight must not land again.
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGCONT))
	produce(200)
	waitFor("every record after a resumed", 30*time.Second, func() bool { return rows() >= uint64(sentN.Load()) })
	// Let a's timers, flushes and late inserts run, and the group settle.
	time.Sleep(2 * frozenSession)
	produce(100)
	waitFor("the group to settle with every partition moving", 30*time.Second, func() bool {
		return rows() >= uint64(sentN.Load()) && frozenLag(t, brokers, cfg.Group, topic) == 0
	})

	n := uint64(sentN.Load())
	assert.Equal(t, n, rows(), "rows")
	assert.Equal(t, n, env.count(t, "SELECT uniqExact(id) FROM "+db+".events"), "distinct ids")
	assert.Equal(t, n, env.count(t, "SELECT max(id) + 1 FROM "+db+".events"), "no id missing")
	assert.Equal(t, n, env.count(t, "SELECT sum(n) FROM "+db+".per_partition"), "materialized view total")
	assert.Equal(t, uint64(0), env.count(t, "SELECT count() FROM (SELECT partition, sum(n) AS v FROM "+db+".per_partition GROUP BY partition) AS p "+
		"FULL JOIN (SELECT partition, count() AS c FROM "+db+".events GROUP BY partition) AS e USING partition WHERE v != c"), "view per partition")
	// What stopped a after it resumed: the journal's fence, or the end of
	// its consumer-group generation, which kafka-go notices at once.
	fenced, ended := 0, 0
	a.mu.Lock()
	resumed := false
	for _, l := range a.out {
		resumed = resumed || l == "resumed"
		if resumed && strings.Contains(l, "another instance owns this partition") {
			fenced++
		}
		if resumed && strings.Contains(l, "generation has ended") {
			ended++
		}
	}
	a.mu.Unlock()
	require.True(t, resumed, "a never resumed")
	// The promise is the exact table above. How a was stopped is a
	// diagnostic: usually the journal's fence, but the end of its
	// generation may close the chain (and drop the unjournaled batch,
	// which the new owner replays from Kafka) before the resumed flush
	// reaches the journal, and then nothing is fenced. CI saw that once.
	if freezeAt == "record" && fenced == 0 {
		t.Logf("run %d: a resumed before journaling and was not fenced; its chain was closed first", run)
	}
	if os.Getenv("EXACTLYONCE_FROZEN_DUMP") != "" || (freezeAt == "record" && fenced == 0) {
		a.mu.Lock()
		t.Logf("a's output:\n%s", strings.Join(a.out, "\n"))
		a.mu.Unlock()
	}
	t.Logf("run %d: frozen before the %s; %d records sent; a built %d chains, b %d; after resuming a was fenced %d times, cancelled by its generation's end %d times",
		run, freezeAt, n, len(a.lines("chain ")), len(b.lines("chain ")), fenced, ended)
}

// frozenLag is how many records of the topic are past the group's committed
// offsets, -1 while that is unknown (no offsets yet; Apache Kafka's group
// coordinator loading).
func frozenLag(t *testing.T, brokers []string, group, topic string) int64 {
	ctx := context.Background()
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	cl := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 5 * time.Second, Transport: tr}
	ps := make([]int, frozenPartitions)
	req := map[string][]kafka.OffsetRequest{}
	for i := range ps {
		ps[i] = i
		req[topic] = append(req[topic], kafka.LastOffsetOf(i))
	}
	ends, err := cl.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: req})
	require.NoError(t, err)
	resp, err := cl.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: ps}})
	if err == nil && resp.Error != nil {
		err = resp.Error
	}
	if errors.Is(err, kafka.GroupIdNotFound) || errors.Is(err, kafka.NotCoordinatorForGroup) ||
		errors.Is(err, kafka.GroupCoordinatorNotAvailable) || errors.Is(err, kafka.GroupLoadInProgress) {
		return -1
	}
	require.NoError(t, err)
	committed := map[int]int64{}
	for _, p := range resp.Topics[topic] {
		committed[p.Partition] = p.CommittedOffset
	}
	var lag int64
	for _, p := range ends.Topics[topic] {
		lag += max(p.LastOffset-committed[p.Partition], 0)
	}
	return lag
}
