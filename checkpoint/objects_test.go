package checkpoint_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// chained is an ObjectParticipant in the shape of an incremental snapshot:
// every checkpoint writes one object, and the state names the newest three
// (older ones drop out, as deltas do after a compaction). Restore reads
// every named object and checks its content.
type chained struct {
	objs     *checkpoint.Objects
	refs     []string
	restored []string
}

func (c *chained) UseObjects(o *checkpoint.Objects) { c.objs = o }

func (c *chained) Snapshot(ctx context.Context, id checkpoint.ID) ([]byte, error) {
	name := fmt.Sprintf("obj-%d", id)
	if _, err := c.objs.Write(ctx, name, func(w io.Writer) error {
		_, err := io.WriteString(w, name)
		return err
	}); err != nil {
		return nil, err
	}
	c.refs = append(c.refs, name)
	c.refs = c.refs[max(0, len(c.refs)-3):]
	return []byte(strings.Join(c.refs, ",")), nil
}

func (c *chained) References(state []byte) ([]string, error) {
	return strings.Split(string(state), ","), nil
}

func (c *chained) Restore(ctx context.Context, state []byte) error {
	refs := strings.Split(string(state), ",")
	for _, r := range refs {
		b, err := c.objs.Read(ctx, r)
		if err != nil {
			return err
		}
		if string(b) != r {
			return fmt.Errorf("object %s holds %q", r, b)
		}
	}
	c.refs, c.restored = refs, refs
	return nil
}

func (c *chained) CheckpointCompleted(context.Context, checkpoint.ID) error { return nil }

// objectsIn lists the participant's stored objects by their names.
func objectsIn(t *testing.T, s checkpoint.Storage, participant string) []string {
	t.Helper()
	prefix := "checkpoints/t/0/objects/" + participant + "/"
	names, err := s.List(context.Background(), prefix)
	require.NoError(t, err)
	out := []string{}
	for _, n := range names {
		out = append(out, strings.TrimPrefix(n, prefix))
	}
	return out
}

// After every checkpoint the stored objects are exactly those the retained
// checkpoints (Keep 2) reference, plus one still being written for a
// checkpoint to come; garbage a crashed run left is removed; a restore in a
// new process reads the newest checkpoint's objects.
func TestObjectsKeptWhileReferenced(t *testing.T) {
	ctx := context.Background()
	storage := checkpoint.NewMemoryStorage()
	// A crash after an object was written and before its checkpoint.
	require.NoError(t, storage.Put(ctx, "checkpoints/t/0/objects/c/obj-crashed", []byte("x")))

	coord := newCoord(t, storage, checkpoint.Options{})
	c := &chained{}
	task, err := coord.Attach(ctx, p0, map[string]checkpoint.Participant{"c": c, "plain": &counter{}})
	require.NoError(t, err)
	// An object a background job wrote for a later checkpoint.
	_, err = c.objs.Write(ctx, "obj-pending", func(w io.Writer) error { return nil })
	require.NoError(t, err)

	for i := 1; i <= 6; i++ {
		require.NoError(t, task.Checkpoint(ctx, nil, int64(i), checkpoint.Meta{}, nil))
		// Checkpoint i references obj-(i-2)..obj-i, checkpoint i-1
		// obj-(i-3)..obj-(i-1): obj-(i-3) stays until checkpoint i+1.
		want := []string{}
		for j := max(1, i-3); j <= i; j++ {
			want = append(want, fmt.Sprintf("obj-%d", j))
		}
		want = append(want, "obj-pending")
		assert.ElementsMatch(t, want, objectsIn(t, storage, "c"), "after checkpoint %d", i)
	}
	latest, err := coord.Store().Latest(ctx, p0)
	require.NoError(t, err)
	assert.Equal(t, []string{"c/obj-4", "c/obj-5", "c/obj-6"}, latest.Objects)
	task.Detach()

	// A new process: the pending object is garbage now, and goes.
	coord2 := newCoord(t, storage, checkpoint.Options{})
	c2 := &chained{}
	task2, err := coord2.Attach(ctx, p0, map[string]checkpoint.Participant{"c": c2, "plain": &counter{}})
	require.NoError(t, err)
	defer task2.Detach()
	assert.Equal(t, []string{"obj-4", "obj-5", "obj-6"}, c2.restored)
	require.NoError(t, task2.Checkpoint(ctx, nil, 7, checkpoint.Meta{}, nil))
	assert.ElementsMatch(t, []string{"obj-4", "obj-5", "obj-6", "obj-7"}, objectsIn(t, storage, "c"))
}

// A checkpoint naming an object that is gone is never restored: restore
// falls back to the newest checkpoint whose objects are all there.
func TestMissingObjectFallsBack(t *testing.T) {
	ctx := context.Background()
	storage := checkpoint.NewMemoryStorage()
	coord := newCoord(t, storage, checkpoint.Options{})
	task, err := coord.Attach(ctx, p0, map[string]checkpoint.Participant{"c": &chained{}})
	require.NoError(t, err)
	for i := 1; i <= 2; i++ {
		require.NoError(t, task.Checkpoint(ctx, nil, int64(i), checkpoint.Meta{}, nil))
	}
	task.Detach()
	require.NoError(t, storage.Delete(ctx, "checkpoints/t/0/objects/c/obj-2"))

	c := &chained{}
	task2, err := newCoord(t, storage, checkpoint.Options{}).Attach(ctx, p0, map[string]checkpoint.Participant{"c": c})
	require.NoError(t, err)
	defer task2.Detach()
	require.NotNil(t, task2.Restored())
	assert.Equal(t, checkpoint.ID(1), task2.Restored().ID)
	assert.Equal(t, []string{"obj-1"}, c.restored)
}

// Save streams the file: the stored bytes are Encode's.
func TestSaveStreamsEncodeBytes(t *testing.T) {
	ctx := context.Background()
	for _, storage := range []checkpoint.Storage{checkpoint.NewMemoryStorage(), putOnly{checkpoint.NewMemoryStorage()}} {
		store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
		require.NoError(t, err)
		cp := goldenCheckpoint()
		cp.Objects = []string{"dedup/base-1", "dedup/delta-2"}
		size, err := store.Save(ctx, cp)
		require.NoError(t, err)
		want, err := checkpoint.Encode(cp)
		require.NoError(t, err)
		name, err := store.Name(cp)
		require.NoError(t, err)
		got, err := storage.Get(ctx, name)
		require.NoError(t, err)
		assert.Equal(t, want, got)
		assert.Equal(t, len(want), size)
		back, err := checkpoint.Decode(got)
		require.NoError(t, err)
		assert.Equal(t, cp.Objects, back.Objects)
	}
}

// putOnly hides MemoryStorage's StreamPutter: PutStream falls back to Put.
type putOnly struct{ checkpoint.Storage }
