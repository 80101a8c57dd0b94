package checkpoint_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/checkpointtest"
	"github.com/exactlyonce/exactlyonce/checkpoint/internal/crashfs"
)

// FSStorage on the crashable filesystem keeps the Storage contract.
func TestFSStorageOnCrashFS(t *testing.T) {
	checkpointtest.TestStorage(t, func(t *testing.T) checkpoint.Storage {
		s, err := checkpoint.NewFSStorageOn(crashfs.New(), "/store")
		require.NoError(t, err)
		return s
	})
}

// crashStep is one write of the crash scenario.
type crashStep struct {
	op, name, data string
}

// Every kind of write, over nested directories, overwrites and a lost
// conditional write.
var crashSteps = []crashStep{
	{"put", "a", "a1"},
	{"create", "b", "b1"},
	{"put", "a", "a2, longer than a1"},
	{"replace", "b", "b2"},
	{"create", "c/d/e", "e1"},
	{"put", "c/d/f", "f1"},
	{"delete", "a", ""},
	{"replace", "c/d/e", "e2"},
	{"create", "b", "refused: b exists"},
	{"put", "a", "a3"},
	{"delete", "c/d/f", ""},
	{"stream", "c/d/g", "g1, streamed in pieces"},
	{"stream", "a", "a4, streamed over a3"},
}

// runCrashSteps runs the scenario until the filesystem crashes. It returns
// the content of every name after the acknowledged writes (absent names are
// missing) and the index of the write in flight at the crash, or -1.
func runCrashSteps(t *testing.T, s checkpoint.Storage) (map[string]string, int) {
	ctx := context.Background()
	acked := map[string]string{}
	for i, st := range crashSteps {
		var err error
		switch st.op {
		case "put":
			err = s.Put(ctx, st.name, []byte(st.data))
		case "create":
			_, err = s.Create(ctx, st.name, []byte(st.data))
		case "replace":
			var v checkpoint.Version
			if _, v, err = s.GetVersion(ctx, st.name); err == nil {
				_, err = s.Replace(ctx, st.name, []byte(st.data), v)
			}
		case "delete":
			err = s.Delete(ctx, st.name)
		case "stream":
			err = checkpoint.PutStream(ctx, s, st.name, func(w io.Writer) error {
				for _, piece := range strings.SplitAfter(st.data, " ") {
					if _, err := io.WriteString(w, piece); err != nil {
						return err
					}
				}
				return nil
			})
		}
		switch {
		case errors.Is(err, crashfs.ErrCrashed):
			return acked, i
		case errors.Is(err, checkpoint.ErrConflict) && st.data == "refused: b exists":
			continue
		case err != nil:
			t.Fatalf("step %d %+v: %v", i, st, err)
		case st.op == "delete":
			delete(acked, st.name)
		default:
			acked[st.name] = st.data
		}
	}
	return acked, -1
}

// A crash at every step of the scenario, losing everything unsynced (and,
// with a random source, an arbitrary part of it): every acknowledged write
// survives, and the write in flight is either wholly there or wholly absent,
// in Get and in List alike.
func TestFSStorageCrashAtEveryStep(t *testing.T) {
	// Count the filesystem calls of a run without a crash.
	fsys := crashfs.New()
	s, err := checkpoint.NewFSStorageOn(fsys, "/store")
	require.NoError(t, err)
	before := fsys.Ops()
	runCrashSteps(t, s)
	total := fsys.Ops() - before

	for crashAt := 1; crashAt <= total+1; crashAt++ {
		for seed := range 4 {
			var rng *rand.Rand
			if seed > 0 {
				rng = rand.New(rand.NewPCG(uint64(crashAt), uint64(seed)))
			}
			fsys := crashfs.New()
			s, err := checkpoint.NewFSStorageOn(fsys, "/store")
			require.NoError(t, err)
			fsys.SetCrashAfter(crashAt)
			acked, inflight := runCrashSteps(t, s)
			fsys.Crash(rng)
			checkAfterCrash(t, fmt.Sprintf("crash at call %d, seed %d", crashAt, seed), fsys, acked, inflight)
		}
	}
}

func checkAfterCrash(t *testing.T, at string, fsys *crashfs.FS, acked map[string]string, inflight int) {
	t.Helper()
	ctx := context.Background()
	s, err := checkpoint.NewFSStorageOn(fsys, "/store")
	require.NoError(t, err, at)
	assert.Empty(t, tempFiles(t, fsys, "/store"), "%s: the dead writer's temporary files are removed at open", at)
	names := map[string]bool{}
	for _, st := range crashSteps {
		names[st.name] = true
	}
	present := []string{}
	for name := range names {
		want, wantOK := acked[name]
		got, err := s.Get(ctx, name)
		gotOK := err == nil
		if err != nil && !errors.Is(err, checkpoint.ErrNotFound) {
			t.Fatalf("%s: get %s: %v", at, name, err)
		}
		if gotOK {
			present = append(present, name)
		}
		if gotOK == wantOK && string(got) == want {
			continue
		}
		if inflight >= 0 && crashSteps[inflight].name == name {
			st := crashSteps[inflight]
			if st.op == "delete" && !gotOK {
				continue // the delete in flight happened
			}
			if st.op != "delete" && gotOK && string(got) == st.data {
				continue // the write in flight happened, whole
			}
		}
		t.Errorf("%s (in flight: step %d): %s holds %q (present %v), want %q (present %v)",
			at, inflight, name, got, gotOK, want, wantOK)
	}
	sort.Strings(present)
	listed, err := s.List(ctx, "")
	require.NoError(t, err, at)
	assert.Equal(t, present, append([]string{}, listed...), "%s: List matches Get", at)

	// The storage works after the crash.
	_, err = s.Create(ctx, "after/crash", []byte("x"))
	assert.NoError(t, err, at)
}

// tempFiles lists the temporary files below dir: names starting with "#",
// the directories' lock files ("#lock") aside.
func tempFiles(t *testing.T, fsys checkpoint.FS, dir string) []string {
	t.Helper()
	entries, err := fsys.ReadDir(dir)
	require.NoError(t, err)
	var got []string
	for _, e := range entries {
		p := path.Join(dir, e.Name())
		switch {
		case e.IsDir():
			got = append(got, tempFiles(t, fsys, p)...)
		case strings.HasPrefix(e.Name(), "#") && e.Name() != "#lock":
			got = append(got, p)
		}
	}
	return got
}
