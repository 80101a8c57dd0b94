package kafkasource_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
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
	envChild   = "KAFKASOURCE_KILL_CHILD" // "run" or "finish"
	envBrokers = "KAFKASOURCE_KILL_BROKERS"
	envDir     = "KAFKASOURCE_KILL_DIR"
	envGroup   = "KAFKASOURCE_KILL_GROUP"

	killTopic      = "kill"
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

// TestKillChild is the pipeline that TestKill9 runs in a child process.
func TestKillChild(t *testing.T) {
	mode := os.Getenv(envChild)
	if mode == "" {
		t.Skip("helper process for TestKill9")
	}
	brokers := strings.Split(os.Getenv(envBrokers), ",")
	dir := os.Getenv(envDir)
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
	src, err := kafkasource.New(testGroup(t, kafkasource.Group{Brokers: brokers, ID: os.Getenv(envGroup), Topics: []string{killTopic}}),
		coord, newProc, fastGroup)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	if mode != "finish" {
		require.NoError(t, <-done) // until killed
		return
	}
	for {
		select {
		case err := <-done:
			require.NoError(t, err)
			t.Fatal("Run returned early")
		case <-time.After(20 * time.Millisecond):
		}
		all := true
		for _, cp := range latest(t, store, killTopic, killPartitions) {
			all = all && cp != nil && cp.NextOffset == killRecords
		}
		if all {
			cancel()
			require.NoError(t, <-done)
			return
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
	brokers := testkit.Kafka(t)
	testkit.CreateTopic(t, brokers, killTopic, killPartitions)
	dir := t.TempDir()
	storage, err := checkpoint.NewFSStorage(filepath.Join(dir, "store"))
	require.NoError(t, err)
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
	require.NoError(t, err)

	child := func(mode, group string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKillChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), envChild+"="+mode, envBrokers+"="+strings.Join(brokers, ","),
			envDir+"="+dir, envGroup+"="+group)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		return cmd
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 5))
	prev := make([]int64, killPartitions)
	kept := make([]int, killPartitions) // checkpoints retained after the last round
	for round := range killRounds {
		// New input every round, so that late kills still land mid-stream.
		produce(t, brokers, killTopic, killPartitions, round*killPerRound, killPerRound)
		group := fmt.Sprintf("kill-%d", round)
		cmd := child("run", group)
		require.NoError(t, cmd.Start())
		time.Sleep(time.Duration(150+rng.IntN(600)) * time.Millisecond)
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()

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

	cmd := child("finish", "kill-final")
	require.NoError(t, cmd.Run(), "the final child finishes")
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
