package devmetrics

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/testkit/webhookkit"
)

// githubExample is one of GitHub's example payloads and its action.
type githubExample struct {
	Action string
	Body   []byte
}

// githubExamples returns GitHub's maintained examples by event type (npm
// pack into the cache on first use). Without npm the test is skipped,
// unless CI=true.
func githubExamples(t *testing.T) map[string][]githubExample {
	t.Helper()
	out := map[string][]githubExample{}
	for _, ex := range webhookkit.GitHubExamples(t) {
		var a struct {
			Action string `json:"action"`
		}
		_ = json.Unmarshal(ex.Body, &a)
		out[ex.Event] = append(out[ex.Event], githubExample{Action: a.Action, Body: ex.Body})
	}
	return out
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

// TestNormalizeGitHubExamples normalizes every example payload GitHub
// maintains for the event types the metrics read: each is either an event
// with the payload's own people and times, or a valid activity the metrics
// do not count; none is rejected.
func TestNormalizeGitHubExamples(t *testing.T) {
	examples := githubExamples(t)
	counted := map[string]int{}
	for _, name := range []string{"pull_request", "pull_request_review", "pull_request_review_comment", "deployment_status", "ping", "push"} {
		require.NotEmpty(t, examples[name], name)
		for i, ex := range examples[name] {
			id := fmt.Sprintf("%s-%d", name, i)
			ev, err := Normalize("github", name, id, ex.Body)
			if err != nil {
				require.ErrorIs(t, err, ErrNotCounted, "%s %s", id, ex.Action)
				continue
			}
			counted[ev.Type]++
			var p ghPayload
			require.NoError(t, json.Unmarshal(ex.Body, &p))
			org := "codertocat"
			if p.Organization != nil {
				org = "octocoders"
			}
			want := Event{OrgID: org, Source: "github", EventID: id, EmployeeID: "Codertocat"}
			switch name {
			case "pull_request_review":
				want.Type, want.Status = TypeReview, "commented"
				want.Subject = "Codertocat/Hello-World#2"
				want.Time = time.Date(2019, 5, 15, 15, 20, 38, 0, time.UTC)
				want.Opened = time.Date(2019, 5, 15, 15, 20, 33, 0, time.UTC)
				want.LatencyS = 5
			case "pull_request_review_comment":
				want.Type, want.Subject = TypeReviewComment, "Codertocat/Hello-World#2"
				want.Time = time.Date(2019, 5, 15, 15, 20, 37, 0, time.UTC)
			case "deployment_status":
				want.Type, want.Subject, want.Status = TypeDeployment, "145988746", "success"
				want.Time = time.Date(2019, 5, 15, 15, 20, 55, 0, time.UTC)
			default:
				t.Fatalf("%s %s counted as %+v", id, ex.Action, ev)
			}
			assert.Equal(t, want, ev, id)
		}
	}
	// What GitHub's examples hold of each counted activity.
	assert.Equal(t, map[string]int{TypeReview: 3, TypeReviewComment: 3, TypeDeployment: 3}, counted)

	// No example is a merged pull request: merge the closed ones.
	for i, ex := range examples["pull_request"] {
		if ex.Action != "closed" {
			continue
		}
		ev, err := Normalize("github", "pull_request", "m", mergedVariant(t, ex.Body, "2019-05-15T16:00:00Z"))
		require.NoError(t, err, "closed example %d, merged", i)
		assert.Equal(t, TypePRMerged, ev.Type)
		assert.Equal(t, "Codertocat", ev.EmployeeID)
		assert.Equal(t, time.Date(2019, 5, 15, 16, 0, 0, 0, time.UTC), ev.Time)
		assert.Equal(t, "Codertocat/Hello-World#2", ev.Subject)
	}
}

// jiraBody builds a Jira Cloud issue webhook as Atlassian documents it.
func jiraBody(t testing.TB, event, issueType string, transition bool, mutate func(map[string]any)) []byte {
	t.Helper()
	return webhookkit.JiraIssueBody(t, event, issueType, transition, mutate)
}

func TestNormalizeJira(t *testing.T) {
	at := time.UnixMilli(1793000000123).UTC()
	opened := time.Date(2026, 10, 26, 8, 30, 0, 0, time.UTC)
	tests := []struct {
		name  string
		event string
		give  []byte
		want  Event
		err   error // ErrNotCounted, or nil
	}{
		{name: "incident created", event: "jira:issue_created", give: jiraBody(t, "jira:issue_created", "Incident", false, nil),
			want: Event{OrgID: "acme.atlassian.net", Source: "jira", EventID: "d", Type: TypeIncidentOpened,
				EmployeeID: "5b10a2844c20165700ede21g", Time: at, Subject: "OPS-7", Status: "To Do", Opened: opened}},
		{name: "incident transitioned", event: "jira:issue_updated", give: jiraBody(t, "jira:issue_updated", "Incident", true, nil),
			want: Event{OrgID: "acme.atlassian.net", Source: "jira", EventID: "d", Type: TypeIncidentTransitioned,
				EmployeeID: "5b10a2844c20165700ede21g", Time: at, Subject: "OPS-7", Status: "In Progress", Opened: opened}},
		{name: "bug transitioned", event: "jira:issue_updated", give: jiraBody(t, "jira:issue_updated", "Bug", true, nil),
			want: Event{OrgID: "acme.atlassian.net", Source: "jira", EventID: "d", Type: TypeIssueTransitioned,
				EmployeeID: "5b10ac8d82e05b22cc7d4ef5", Time: at, Subject: "OPS-7", Status: "In Progress"}},
		{name: "bug created", event: "jira:issue_created", give: jiraBody(t, "jira:issue_created", "Bug", false, nil), err: ErrNotCounted},
		{name: "incident edited, no transition", event: "jira:issue_updated", give: jiraBody(t, "jira:issue_updated", "Incident", false, nil), err: ErrNotCounted},
		{name: "comment created", event: "comment_created", give: []byte(`{"timestamp":1,"webhookEvent":"comment_created"}`), err: ErrNotCounted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := Normalize("jira", tt.event, "d", tt.give)
			if tt.err != nil {
				require.ErrorIs(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, ev)
		})
	}
}

// TestNormalizeRejects: a payload that lacks what its event type always has
// is a *NormalizeError with the reason, never a zero event.
func TestNormalizeRejects(t *testing.T) {
	examples := githubExamples(t)
	first := func(event, action string) []byte {
		for _, ex := range examples[event] {
			if ex.Action == action {
				return ex.Body
			}
		}
		t.Fatalf("no %s %s example", event, action)
		return nil
	}
	edit := func(body []byte, f func(map[string]any)) []byte {
		var p map[string]any
		require.NoError(t, json.Unmarshal(body, &p))
		f(p)
		b, err := json.Marshal(p)
		require.NoError(t, err)
		return b
	}
	review := first("pull_request_review", "submitted")
	tests := []struct {
		name, source, event string
		give                []byte
		reason              string
	}{
		{"not JSON", "github", "pull_request", []byte(`{"action":`), "payload"},
		{"merged without merged_at", "github", "pull_request", edit(mergedVariant(t, first("pull_request", "closed"), "x"),
			func(p map[string]any) { p["pull_request"].(map[string]any)["merged_at"] = nil }), "merged_at"},
		{"merged at no time", "github", "pull_request", mergedVariant(t, first("pull_request", "closed"), "yesterday"), "merged_at"},
		{"review without submitted_at", "github", "pull_request_review", edit(review,
			func(p map[string]any) { delete(p["review"].(map[string]any), "submitted_at") }), "submitted_at"},
		{"review without reviewer", "github", "pull_request_review", edit(review,
			func(p map[string]any) { p["review"].(map[string]any)["user"] = nil }), "review.user"},
		{"no organisation", "github", "pull_request_review", edit(review, func(p map[string]any) {
			delete(p, "organization")
			delete(p["repository"].(map[string]any), "owner")
		}), "organization"},
		{"jira without timestamp", "jira", "jira:issue_created", jiraBody(t, "jira:issue_created", "Incident", false,
			func(p map[string]any) { delete(p, "timestamp") }), "timestamp"},
		{"jira incident without reporter", "jira", "jira:issue_created", jiraBody(t, "jira:issue_created", "Incident", false,
			func(p map[string]any) { delete(p["issue"].(map[string]any)["fields"].(map[string]any), "reporter") }), "reporter"},
		{"jira without site", "jira", "jira:issue_updated", jiraBody(t, "jira:issue_updated", "Bug", true,
			func(p map[string]any) { p["issue"].(map[string]any)["self"] = "" }), "site"},
		{"jira event mismatch", "jira", "jira:issue_updated", jiraBody(t, "jira:issue_created", "Bug", true, nil), "webhookEvent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := Normalize(tt.source, tt.event, "d", tt.give)
			var nerr *NormalizeError
			require.ErrorAs(t, err, &nerr, "got %+v", ev)
			assert.Equal(t, tt.source, nerr.Source)
			assert.Equal(t, tt.event, nerr.EventType)
			assert.Contains(t, nerr.Reason, tt.reason)
			assert.Equal(t, Event{}, ev)
		})
	}
}
