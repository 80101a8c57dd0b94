package chaos

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/harness/internal/demo"
)

var (
	buildOnce sync.Once
	built     demo.Binaries
	buildErr  error
)

// binaries builds the gateway and the processor once per test binary.
func binaries(t *testing.T) demo.Binaries {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "exactlyonce-chaos-bin-")
		if err != nil {
			buildErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		built, buildErr = demo.BuildBinaries(ctx, dir)
	})
	require.NoError(t, buildErr)
	return built
}

// testWriter writes each line to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// keepOnFailure copies the evidence of a failed run in dir (its history,
// result, the binaries' logs and the Kafka partitions a finding named) out
// of the test's temporary directory, which is removed after the test, and
// says where. Registered after t.TempDir, it runs before that removal.
func keepOnFailure(t *testing.T, dir string, seed uint64) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		keep := filepath.Join(os.TempDir(), fmt.Sprintf("exactlyonce-chaos-%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), seed))
		var errs []error
		_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			rel, _ := filepath.Rel(dir, path)
			name := d.Name()
			kept := rel == "logs" || strings.HasPrefix(rel, "logs"+string(filepath.Separator)) ||
				name == "history.jsonl" || name == "chaos.json" || (strings.HasPrefix(name, "kafka-") && strings.HasSuffix(name, ".log"))
			switch {
			case d.IsDir() && rel != "." && rel != "logs":
				return filepath.SkipDir
			case d.IsDir() || !kept || !d.Type().IsRegular():
				return nil
			}
			if err := os.MkdirAll(filepath.Dir(filepath.Join(keep, rel)), 0o755); err != nil {
				errs = append(errs, err)
				return nil
			}
			b, err := os.ReadFile(path)
			if err == nil {
				err = os.WriteFile(filepath.Join(keep, rel), b, 0o644)
			}
			if err != nil {
				errs = append(errs, err)
			}
			return nil
		})
		if err := errors.Join(errs...); err != nil {
			t.Logf("keeping the failed run's files: %v", err)
		}
		t.Logf("the failed run's history, result and logs are kept in %s", keep)
	})
}
