package kafkasource_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/testkit"
)

const (
	envBrokers = "KAFKASOURCE_KILL_BROKERS"
	envDir     = "KAFKASOURCE_KILL_DIR"
	envGroup   = "KAFKASOURCE_KILL_GROUP"

	killPartitions = 4
	killRounds     = 15
	killPerRound   = 400 // records added to each partition before every round
	killRecords    = killRounds * killPerRound
)

// processedLog is a participant that appends "partition offset" for every
// processed record and flushes in Snapshot, like a sink: a completed
// checkpoint implies every line before its barrier is written.
type processedLog struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (l *processedLog) add(m kafka.Message) {
	l.mu.Lock()
	fmt.Fprintf(l.w, "%d %d\n", m.Partition, m.Offset)
	l.mu.Unlock()
}

type logParticipant struct{ l *processedLog }

func (p logParticipant) Snapshot(context.Context, checkpoint.ID) ([]byte, error) {
	p.l.mu.Lock()
	defer p.l.mu.Unlock()
	return []byte{}, p.l.w.Flush()
}
func (logParticipant) Restore(context.Context, []byte) error                    { return nil }
func (logParticipant) CheckpointCompleted(context.Context, checkpoint.ID) error { return nil }

// killPipeline is the pipeline that TestKill9 runs in a child process,
// reading topic as group: mode "run" until killed, "finish" until every
// record is checkpointed.
func killPipeline(t *testing.T, brokers []string, topic, dir, group, mode string) error {
	f, err := os.OpenFile(filepath.Join(dir, "processed.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(t, err)
	defer f.Close()
	plog := &processedLog{w: bufio.NewWriter(f)}

	storage, err := checkpoint.NewFSStorage(filepath.Join(dir, "store"))
	require.NoError(t, err)
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: 20 * time.Millisecond})
	require.NoError(t, err)
	newProc := func(_ context.Context, p checkpoint.TopicPartition) (*kafkasource.Processor, error) {
		c := &counter{}
		return &kafkasource.Processor{
			Participants: map[string]checkpoint.Participant{"counter": c, "log": logParticipant{plog}},
			Process: func(_ context.Context, m kafka.Message) error {
				plog.add(m)
				if m.Offset%3 == 0 {
					time.Sleep(time.Millisecond) // slow enough to be killed mid-stream
				}
				return c.add(m)
			},
		}, nil
	}
	src, err := kafkasource.New(testGroup(t, kafkasource.Group{Brokers: brokers, ID: group, Topics: []string{topic}}),
		coord, newProc, fastGroup)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	if mode != "finish" {
		return <-done // until killed
	}
	for {
		select {
		case err := <-done:
			require.NoError(t, err)
			t.Fatal("Run returned early")
		case <-time.After(20 * time.Millisecond):
		}
		all := true
		for _, cp := range latest(t, store, topic, killPartitions) {
			all = all && cp != nil && cp.NextOffset == killRecords
		}
		if all {
			cancel()
			return <-done
		}
	}
}

// TestKill9 kills a pipeline child process with SIGKILL at random points,
// many times, then lets one finish, and checks after every kill that each
// stored checkpoint's state matches its offset and that the group's
// committed offsets never passed a completed checkpoint; at the end, that
// every record was processed at least once and the final state is exact.
//
// Each child joins under a fresh group ID: a SIGKILLed member would
// otherwise hold its partitions until its session times out. The checkpoint
// store, not the group, carries the position from child to child.
func TestKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("kills child processes for ~20s")
	}
	// What the child runs: the test writes it to cfg.Dir before each
	// start.
	type roundFile struct{ Mode, Group string } // Mode "run" or "finish"
	setRound := func(dir string, r roundFile) {
		b, err := json.Marshal(r)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "round.json"), b, 0o644))
	}
	type config struct {
		Brokers           []string
		Topic, Dir, Group string // Group: the first child's
	}
	cfg := testkit.Setup(t, "kill9", func() config {
		c := config{Brokers: testkit.Kafka(t), Topic: testkit.Name(t, "kill"), Dir: t.TempDir(), Group: testkit.Name(t, "kill0")}
		testkit.CreateTopic(t, c.Brokers, c.Topic, killPartitions)
		// New input every round, so that late kills still land mid-stream.
		produce(t, c.Brokers, c.Topic, killPartitions, 0, killPerRound)
		setRound(c.Dir, roundFile{Mode: "run", Group: c.Group})
		return c
	})
	child := testkit.Func(t, "pipeline", func(context.Context) error {
		b, err := os.ReadFile(filepath.Join(cfg.Dir, "round.json"))
		require.NoError(t, err)
		var r roundFile
		require.NoError(t, json.Unmarshal(b, &r))
		return killPipeline(t, cfg.Brokers, cfg.Topic, cfg.Dir, r.Group, r.Mode)
	})
	brokers, killTopic, dir := cfg.Brokers, cfg.Topic, cfg.Dir
	storage, err := checkpoint.NewFSStorage(filepath.Join(dir, "store"))
	require.NoError(t, err)
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
	require.NoError(t, err)

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 5))
	prev := make([]int64, killPartitions)
	kept := make([]int, killPartitions) // checkpoints retained after the last round
	group := cfg.Group
	for round := range killRounds {
		if round > 0 {
			produce(t, brokers, killTopic, killPartitions, round*killPerRound, killPerRound)
			group = testkit.Name(t, fmt.Sprintf("kill%d", round))
			setRound(dir, roundFile{Mode: "run", Group: group})
			child.Start()
		}
		time.Sleep(time.Duration(150+rng.IntN(600)) * time.Millisecond)
		child.Kill()

		cps := latest(t, store, killTopic, killPartitions)
		com := committed(t, brokers, group, killTopic, killPartitions)
		for p, cp := range cps {
			var next int64
			if cp != nil {
				next = cp.NextOffset
				requireConsistent(t, cp)
			}
			require.GreaterOrEqual(t, next, prev[p], "round %d partition %d: newest checkpoint went back", round, p)
			prev[p] = next
			require.LessOrEqual(t, com[p], next,
				"round %d partition %d: committed offset past the newest completed checkpoint", round, p)
		}
		// Every retained checkpoint, not only the newest, is consistent.
		for p := range killPartitions {
			ids, err := store.List(context.Background(), checkpoint.TopicPartition{Topic: killTopic, Partition: p})
			require.NoError(t, err)
			// A kill between a Put and the pruning after it leaves one
			// extra; a child killed before its first pruning adds one to
			// what the last left. Any pruning brings it back to Keep.
			assert.LessOrEqual(t, len(ids), max(checkpoint.DefaultKeep, kept[p])+1, "round %d partition %d", round, p)
			kept[p] = len(ids)
			names, err := storage.List(context.Background(), fmt.Sprintf("%s/%s/%d/", checkpoint.DefaultPrefix, killTopic, p))
			require.NoError(t, err)
			require.Len(t, names, len(ids))
			for _, name := range names {
				data, err := storage.Get(context.Background(), name)
				require.NoError(t, err)
				cp, err := checkpoint.Decode(data) // atomic Put: never torn by a kill
				require.NoError(t, err, "round %d: %s", round, name)
				requireConsistent(t, cp)
			}
		}
		t.Logf("round %d: checkpointed offsets %v, committed %v", round, prev, com)
	}

	setRound(dir, roundFile{Mode: "finish", Group: testkit.Name(t, "killfinal")})
	child.Start()
	require.NoError(t, child.Wait(5*time.Minute), "the final child finishes")
	for _, cp := range latest(t, store, killTopic, killPartitions) {
		require.NotNil(t, cp)
		assert.Equal(t, int64(killRecords), cp.NextOffset)
		requireConsistent(t, cp)
	}

	// At least once: every offset appears in the processed log.
	data, err := os.ReadFile(filepath.Join(dir, "processed.log"))
	require.NoError(t, err)
	seen := make([][]int, killPartitions)
	for p := range seen {
		seen[p] = make([]int, killRecords)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	for _, line := range lines {
		ps, os_, ok := strings.Cut(line, " ")
		if !ok {
			continue // a line torn by SIGKILL
		}
		p, err1 := strconv.Atoi(ps)
		o, err2 := strconv.Atoi(os_)
		if err1 != nil || err2 != nil || p >= killPartitions || o >= killRecords {
			continue
		}
		seen[p][o]++
	}
	replayed := 0
	for p := range seen {
		for o, n := range seen[p] {
			require.Positive(t, n, "partition %d offset %d never processed", p, o)
			replayed += n - 1
		}
	}
	t.Logf("%d records processed, %d of them replays", len(lines), replayed)
}
