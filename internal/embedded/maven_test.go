package embedded_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/internal/embedded"
)

// needMaven skips (fails under CI=true) when mvn or java is missing.
func needMaven(t *testing.T) {
	t.Helper()
	_, err := exec.LookPath("mvn")
	if err == nil {
		_, err = embedded.JavaPath()
	}
	if err == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("maven unavailable: %v", err)
	}
	t.Skipf("maven unavailable: %v", err)
}

// slf4jAPI is a jar without dependencies, small enough to fetch in a test.
const slf4jAPI = "org.slf4j:slf4j-api:1.7.36"

func TestEnsureMaven(t *testing.T) {
	embedded.SkipShort(t)
	needMaven(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cache := t.TempDir()

	// Concurrent callers fetch once and all get the complete directory.
	var wg sync.WaitGroup
	dirs := make([]string, 3)
	errs := make([]error, 3)
	for i := range dirs {
		wg.Go(func() { dirs[i], errs[i] = embedded.EnsureMaven(ctx, cache, "slf4j-1.7.36", slf4jAPI) })
	}
	wg.Wait()
	for i := range dirs {
		require.NoError(t, errs[i])
		assert.Equal(t, filepath.Join(cache, "maven", "slf4j-1.7.36"), dirs[i])
	}
	cp, err := embedded.MavenClasspath(dirs[0])
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dirs[0], "slf4j-api-1.7.36.jar"), cp)

	// Nothing but the fetched directory and the lock is left in the cache.
	entries, err := os.ReadDir(filepath.Join(cache, "maven"))
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.ElementsMatch(t, []string{".slf4j-1.7.36.lock", "slf4j-1.7.36"}, names)

	// Fetched: a second call does not run Maven (it would fail without it).
	t.Setenv("PATH", "")
	dir, err := embedded.EnsureMaven(ctx, cache, "slf4j-1.7.36", slf4jAPI)
	require.NoError(t, err)
	assert.Equal(t, dirs[0], dir)

	// Other coordinates under the same name are refused.
	_, err = embedded.EnsureMaven(ctx, cache, "slf4j-1.7.36", "org.slf4j:slf4j-api:1.7.35")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "choose another name")
}

func TestEnsureMavenErrors(t *testing.T) {
	embedded.SkipShort(t)
	ctx := context.Background()
	cache := t.TempDir()
	tests := []struct {
		name       string
		giveName   string
		giveCoords []string
		want       string
	}{
		{name: "no coordinates", giveName: "x", want: "no coordinates"},
		{name: "two parts", giveName: "x", giveCoords: []string{"org.slf4j:slf4j-api"}, want: "want group:artifact:version"},
		{name: "empty part", giveName: "x", giveCoords: []string{"org.slf4j::1.7.36"}, want: "want group:artifact:version"},
		{name: "name with a slash", giveName: "a/b", giveCoords: []string{slf4jAPI}, want: "plain directory name"},
		{name: "empty name", giveCoords: []string{slf4jAPI}, want: "plain directory name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := embedded.EnsureMaven(ctx, cache, tt.giveName, tt.giveCoords...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// TestEnsureMavenWithoutMaven: a machine without mvn gets an error that
// says what to install, and wraps ErrNotInstalled.
func TestEnsureMavenWithoutMaven(t *testing.T) {
	embedded.SkipShort(t)
	t.Setenv("PATH", t.TempDir())
	_, err := embedded.EnsureMaven(context.Background(), t.TempDir(), "slf4j-1.7.36", slf4jAPI)
	require.ErrorIs(t, err, embedded.ErrNotInstalled)
	assert.True(t, strings.Contains(err.Error(), "apt-get install maven default-jre-headless"), err.Error())
	assert.Contains(t, err.Error(), "make deps")
}
