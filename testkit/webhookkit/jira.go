package webhookkit

import (
	"encoding/json"
	"testing"
)

// JiraIssueBody builds a Jira Cloud issue webhook (event "jira:issue_created"
// or "jira:issue_updated") as Atlassian documents it: issueType names the
// issue type, transition adds a status change to the changelog (an update
// without it changes the summary), and mutate, when not nil, edits the
// payload before it is encoded.
func JiraIssueBody(t testing.TB, event, issueType string, transition bool, mutate func(map[string]any)) []byte {
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
	if err != nil {
		t.Fatalf("webhookkit: jira payload: %v", err)
	}
	return b
}
