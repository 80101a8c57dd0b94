package dedup_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/dedup"
	"github.com/exactlyonce/exactlyonce/testkit"
)

var pKill = checkpoint.TopicPartition{Topic: "kill", Partition: 0}

// killRecord is record i of the endless input of TestIncrementalKill9: keys
// repeat (duplicates), and time runs one millisecond per record, so keys
// expire after the TTL and come back.
func killRecord(i int64) ([]byte, time.Time) {
	return fmt.Appendf(nil, "key-%d", (i*7919)%150_000), time.Unix(1_800_000_000, 0).Add(time.Duration(i) * time.Millisecond)
}

const (
	killTTL   = 40 * time.Second
	killEvery = 3000 // records between two checkpoints
)

func killOptions(incremental bool) dedup.Options {
	return dedup.Options{Incremental: incremental, MaxDeltas: 4}
}

// TestIncrementalKill9 kills (SIGKILL) a process writing incremental
// checkpoints to an FSStorage in the middle of a delta write, of a
// compaction's base write, and at random, several times in a row, each run
// restoring what the one before left. After every kill the newest
// checkpoint, read from its base and deltas, holds exactly the state of a
// deduplicator that took the records before its offset without any crash:
// no key lost, no expired key back. Garbage left by the kills is deleted by
// the next run's checkpoints.
func TestIncrementalKill9(t *testing.T) {
	dir := testkit.Setup(t, "dir", func() string { return t.TempDir() })
	// The writer: it says "running" once it restored, then checkpoints
	// until killed.
	child := testkit.Func(t, "writer", func(context.Context) error {
		runKillChild(dir)
		return nil
	})
	storage, err := checkpoint.NewFSStorage(dir)
	require.NoError(t, err)
	objDir := filepath.Join(dir, "checkpoints", "kill", "0", "objects", "dedup")
	// Kill when a temporary file of this kind is being written ("" : at a
	// random moment).
	targets := []string{"#delta-", "#base-", "", "#delta-", "#base-", ""}
	hits := map[string]int{}
	for round, target := range targets {
		if round > 0 {
			child.Start()
		}
		running := time.Now().Add(2 * time.Minute)
		for strings.Count(child.Logs(), "running\n") < round+1 {
			require.True(t, child.Running(), "round %d: the child exited before it ran: %v", round, child.Err())
			require.True(t, time.Now().Before(running), "round %d: the child did not start", round)
			time.Sleep(time.Millisecond)
		}
		// Let the state grow for a while, then watch for the target.
		time.Sleep(time.Duration(20+round*25) * time.Millisecond)
		deadline := time.Now().Add(5 * time.Second)
		if target == "" {
			deadline = time.Now().Add(time.Duration(50+round*37) * time.Millisecond)
		}
	wait:
		for time.Now().Before(deadline) {
			if target != "" {
				entries, _ := os.ReadDir(objDir)
				for _, e := range entries {
					if strings.HasPrefix(e.Name(), target) {
						hits[target]++
						break wait
					}
				}
			}
			time.Sleep(200 * time.Microsecond)
		}
		child.Kill()

		offset, got := killRestored(t, storage)
		want := killModel(t, offset)
		require.Equal(t, want, got, "round %d (kill at %q): checkpoint at offset %d", round, target, offset)
		t.Logf("round %d: killed (%q) with a checkpoint at offset %d", round, target, offset)
	}
	assert.Positive(t, hits["#delta-"], "no kill landed in a delta write")
	assert.Positive(t, hits["#base-"], "no kill landed in a compaction")

	// A run after the kills: its checkpoints delete what the kills left,
	// keeping exactly what the retained checkpoints reference.
	ctx := context.Background()
	c := attachKill(t, storage, true)
	next := c.task.Restored().NextOffset
	for range 3 {
		for i := next; i < next+killEvery; i++ {
			key, at := killRecord(i)
			_, err := c.d.Observe(key, at)
			require.NoError(t, err)
		}
		next += killEvery
		require.NoError(t, c.task.Checkpoint(ctx, nil, next, checkpoint.Meta{}, nil))
	}
	time.Sleep(100 * time.Millisecond) // a compaction may have started; it is spared either way
	require.NoError(t, c.task.Checkpoint(ctx, nil, next, checkpoint.Meta{}, nil))
	c.close()
	referenced := map[string]bool{}
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{Keep: 2})
	require.NoError(t, err)
	ids, err := store.List(ctx, pKill)
	require.NoError(t, err)
	names, err := storage.List(ctx, "checkpoints/kill/0/")
	require.NoError(t, err)
	for _, n := range names {
		if !strings.HasSuffix(n, ".ckpt") {
			continue
		}
		b, err := storage.Get(ctx, n)
		require.NoError(t, err)
		cp, err := checkpoint.Decode(b)
		require.NoError(t, err)
		for _, o := range cp.Objects {
			referenced["checkpoints/kill/0/objects/"+o] = true
		}
	}
	require.Len(t, ids, 2)
	objs, err := storage.List(ctx, "checkpoints/kill/0/objects/")
	require.NoError(t, err)
	for _, o := range objs {
		// At most one compaction's base is unreferenced: started by the
		// last checkpoint, cancelled by Close.
		if !referenced[o] {
			assert.Contains(t, o, "/base-", "unreferenced object %s left behind", o)
		}
	}
}

func attachKill(t testing.TB, storage checkpoint.Storage, incremental bool) *incChain {
	c, err := newKillChain(storage, incremental)
	require.NoError(t, err)
	return c
}

func newKillChain(storage checkpoint.Storage, incremental bool) (*incChain, error) {
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{Keep: 2})
	if err != nil {
		return nil, err
	}
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: -1})
	if err != nil {
		return nil, err
	}
	d, err := dedup.New(killTTL, killOptions(incremental))
	if err != nil {
		return nil, err
	}
	task, err := coord.Attach(context.Background(), pKill, map[string]checkpoint.Participant{"dedup": d})
	if err != nil {
		return nil, err
	}
	return &incChain{coord: coord, task: task, d: d}, nil
}

// killRestored restores the newest checkpoint into a deduplicator writing
// full snapshots and returns its offset and full snapshot.
func killRestored(t *testing.T, storage checkpoint.Storage) (int64, []byte) {
	c := attachKill(t, storage, false)
	defer c.close()
	require.NotNil(t, c.task.Restored(), "no checkpoint")
	b, err := c.d.Snapshot(context.Background(), 0)
	require.NoError(t, err)
	return c.task.Restored().NextOffset, b
}

// killModel is the state after records [0, offset) without any crash.
func killModel(t *testing.T, offset int64) []byte {
	d, err := dedup.New(killTTL, killOptions(false))
	require.NoError(t, err)
	defer d.Close()
	for i := range offset {
		key, at := killRecord(i)
		_, err := d.Observe(key, at)
		require.NoError(t, err)
	}
	b, err := d.Snapshot(context.Background(), 0)
	require.NoError(t, err)
	return b
}

// runKillChild restores, then takes records and checkpoints every
// killEvery records until it is killed.
func runKillChild(dir string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "kill child:", err)
		os.Exit(2)
	}
	storage, err := checkpoint.NewFSStorage(dir)
	if err != nil {
		fail(err)
	}
	c, err := newKillChain(storage, true)
	if err != nil {
		fail(err)
	}
	next := int64(0)
	if r := c.task.Restored(); r != nil {
		next = r.NextOffset
	}
	fmt.Println("running")
	ctx := context.Background()
	for {
		for i := next; i < next+killEvery; i++ {
			key, at := killRecord(i)
			if _, err := c.d.Observe(key, at); err != nil {
				fail(err)
			}
		}
		next += killEvery
		if err := c.task.Checkpoint(ctx, nil, next, checkpoint.Meta{}, nil); err != nil {
			fail(err)
		}
	}
}
