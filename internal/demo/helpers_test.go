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
)

// githubExamples loads GitHub's maintained examples (npm pack into the cache
// on first use). Without npm the test is skipped, unless CI=true.
func githubExamples(t *testing.T) map[string][]githubExample {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ex, err := loadGitHubExamples(ctx)
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

// jiraPayload builds a Jira Cloud issue webhook as Atlassian documents it.
func jiraBody(t testing.TB, event, issueType string, transition bool, mutate func(map[string]any)) []byte {
	t.Helper()
	p := map[string]any{
		"timestamp":             int64(1793000000123),
		"webhookEvent":          event,
		"issue_event_type_name": "issue_generic",
		"user": map[string]any{
			"self": "https://acme.atlassian.net/rest/api/2/user?accountId=5b10ac8d82e05b22cc7d4ef5", "accountId": "5b10ac8d82e05b22cc7d4ef5",
			"displayName": "Mia Krystof", "active": true, "timeZone": "Europe/Berlin", "accountType": "atlassian",
		},
		"issue": map[string]any{
			"id": "10002", "self": "https://acme.atlassian.net/rest/api/2/issue/10002", "key": "OPS-7",
			"fields": map[string]any{
				"summary":   "Checkout returns 500",
				"created":   "2026-10-26T09:30:00.000+0100",
				"issuetype": map[string]any{"self": "https://acme.atlassian.net/rest/api/2/issuetype/10004", "id": "10004", "name": issueType, "subtask": false},
				"project":   map[string]any{"self": "https://acme.atlassian.net/rest/api/2/project/10000", "id": "10000", "key": "OPS", "name": "Operations"},
				"reporter":  map[string]any{"accountId": "5b10a2844c20165700ede21g", "displayName": "Emma Richards"},
				"status":    map[string]any{"name": "To Do", "id": "10000"},
			},
		},
	}
	if transition {
		p["changelog"] = map[string]any{"id": "10001", "items": []any{
			map[string]any{"field": "status", "fieldtype": "jira", "fieldId": "status", "from": "10000", "fromString": "To Do", "to": "10001", "toString": "In Progress"},
		}}
	} else if event == "jira:issue_updated" {
		p["changelog"] = map[string]any{"id": "10002", "items": []any{
			map[string]any{"field": "summary", "fieldtype": "jira", "fromString": "Checkout 500", "toString": "Checkout returns 500"},
		}}
	}
	if mutate != nil {
		mutate(p)
	}
	b, err := json.Marshal(p)
	require.NoError(t, err)
	return b
}
