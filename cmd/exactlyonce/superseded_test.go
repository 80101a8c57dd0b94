package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// TestCommandsSkipSupersededCheckpoint: a revoked owner (generation 1,
// paused past its session) saved checkpoint 4 after the partition's next
// owner (generation 2) restored checkpoint 1 and saved 3. A restore takes
// 3, not the newer 4 (checkpoint.ErrSuperseded); checkpoints, show, verify
// say the same, not "4 is the newest intact one".
func TestCommandsSkipSupersededCheckpoint(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	storage, err := checkpoint.NewFSStorage(dir)
	require.NoError(t, err)
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
	require.NoError(t, err)
	tp := checkpoint.TopicPartition{Topic: "webhooks", Partition: 0}
	save := func(id checkpoint.ID, gen int64, parent checkpoint.ID, next int64) {
		_, err := store.Save(ctx, &checkpoint.Checkpoint{ID: id, Partition: tp, NextOffset: next, Generation: gen,
			Member: "m", Parent: parent, Created: time.Now(), States: map[string][]byte{}})
		require.NoError(t, err)
	}
	save(1, 1, 0, 10)
	save(4, 1, 1, 40) // the revoked owner's, its save racing the next owner's
	save(3, 2, 1, 30) // the next owner's, after it restored 1
	latest, err := store.Latest(ctx, tp)
	require.NoError(t, err)
	require.Equal(t, checkpoint.ID(3), latest.ID, "the store's own restore")

	code, out, errOut := exec(t, nil, "checkpoints", "-state-dir", dir, "-topic", "webhooks")
	require.Equal(t, exitOK, code, errOut)
	assert.Regexp(t, `(?m)^0\s+4\s+1\s+40\s.*SUPERSEDED`, out)
	assert.Regexp(t, `(?m)^0\s+3\s+2\s+30\s.*intact, restored next`, out)

	code, out, errOut = exec(t, nil, "checkpoints", "-state-dir", dir, "-topic", "webhooks", "-json")
	require.Equal(t, exitOK, code, errOut)
	var listed map[string][]ckptEntry
	require.NoError(t, json.Unmarshal([]byte(out), &listed))
	require.Len(t, listed["0"], 3)
	assert.True(t, listed["0"][0].Superseded, "checkpoint %d", listed["0"][0].ID)
	assert.True(t, listed["0"][1].Restored, "checkpoint %d", listed["0"][1].ID)

	code, out, errOut = exec(t, nil, "show", "-state-dir", dir, "-topic", "webhooks", "-json")
	require.Equal(t, exitOK, code, errOut)
	var s shown
	require.NoError(t, json.Unmarshal([]byte(out), &s))
	assert.Equal(t, uint64(3), s.Checkpoint.ID, "show without -id shows what a restore takes")

	code, out, errOut = exec(t, nil, "verify", "-state-dir", dir, "-topic", "webhooks")
	require.Equal(t, exitOK, code, "a superseded checkpoint is not damage: %s%s", out, errOut)
	assert.Contains(t, out, "webhooks/0: checkpoint 4 (generation 1) is superseded")
	assert.Contains(t, out, "restores 3 at offset 30")
}
