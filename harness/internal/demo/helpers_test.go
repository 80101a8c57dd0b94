package demo

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/internal/embedded"
	"github.com/exactlyonce/exactlyonce/testkit/webhookkit"
)

// githubExamples loads GitHub's maintained examples (npm pack into the cache
// on first use). Without npm the test is skipped, unless CI=true.
func githubExamples(t *testing.T) map[string][]githubExample {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ex, err := LoadGitHubExamples(ctx)
	if errors.Is(err, embedded.ErrNotInstalled) && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	require.NoError(t, err)
	return ex
}

var (
	buildOnce sync.Once
	built     Binaries
	buildErr  error
)

// binaries builds the gateway and the processor once per test binary.
func binaries(t *testing.T) Binaries {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "exactlyonce-demo-bin-")
		if err != nil {
			buildErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		built, buildErr = BuildBinaries(ctx, dir)
	})
	require.NoError(t, buildErr)
	return built
}

// mergedVariant turns a "closed" pull_request example into a merged one:
// GitHub's examples have no merged pull request.
func mergedVariant(t *testing.T, body []byte, mergedAt string) []byte {
	t.Helper()
	var p map[string]any
	require.NoError(t, json.Unmarshal(body, &p))
	pr := p["pull_request"].(map[string]any)
	pr["merged"], pr["merged_at"], pr["state"] = true, mergedAt, "closed"
	b, err := json.Marshal(p)
	require.NoError(t, err)
	return b
}

// jiraBody builds a Jira Cloud issue webhook as Atlassian documents it.
func jiraBody(t testing.TB, event, issueType string, transition bool, mutate func(map[string]any)) []byte {
	t.Helper()
	return webhookkit.JiraIssueBody(t, event, issueType, transition, mutate)
}
