package chaos

import (
	"context"
	"os"
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
