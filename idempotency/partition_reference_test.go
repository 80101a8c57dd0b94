package idempotency_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/testkit/webhookkit"
)

// The partition functions read only the members they need, in one pass
// (internal/jsonscan). A partition key is what keeps a redelivery in the
// partition of its first delivery, so it must not change across versions:
// these tests compare them with the decoding they replaced, plain
// json.Unmarshal of the whole payload, kept here as the reference.

func TestPartitionsMatchReference(t *testing.T) {
	examples := webhookkit.GitHubExamples(t)
	for _, ex := range examples {
		assertSamePartition(t, ex.Body, idempotency.GitHubPartition, referenceGitHubPartition)
		assertSamePartition(t, ex.Body, idempotency.JiraPartition, referenceJiraPartition)
	}
	files, err := filepath.Glob("testdata/jira/*.json")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		assertSamePartition(t, b, idempotency.JiraPartition, referenceJiraPartition)
		assertSamePartition(t, b, idempotency.GitHubPartition, referenceGitHubPartition)
	}
	t.Logf("%d GitHub examples and %d Jira payloads", len(examples), len(files))
}

func FuzzPartitionsMatchReference(f *testing.F) {
	for _, s := range []string{
		`{"organization":{"login":"Octo-Org"},"repository":{"owner":{"login":"x"}},"sender":{"login":"s"}}`,
		`{"ORGANIZATION":{"LOGIN":"Folded"}}`, `{"organi\u007Aation":{"login":"e"}}`,
		`{"installation":{"id":42}}`, `{"installation":{"id":"42"}}`, `{"sender":"x"}`,
		`{"issue":{"self":"https://x.atlassian.net/rest/api/2/issue/1","key":"ENG-1","fields":{"project":{"key":"ENG"}}}}`,
		`{"comment":{"self":"https://y.atlassian.net/c/1"},"project":{"key":"P","self":"https://z/"}}`,
		`{"issue":null,"user":{"self":"https://u.atlassian.net/"}}`, `[1]`, `null`, `{"a":`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		assertSamePartition(t, b, idempotency.GitHubPartition, referenceGitHubPartition)
		assertSamePartition(t, b, idempotency.JiraPartition, referenceJiraPartition)
	})
}

func assertSamePartition(t *testing.T, body []byte, got, want func(string, []byte) (string, error)) {
	t.Helper()
	g, gErr := got("", body)
	w, wErr := want("", body)
	// A type error names the struct's package: the reference's is this one.
	if (gErr == nil) != (wErr == nil) ||
		gErr != nil && gErr.Error() != strings.ReplaceAll(wErr.Error(), "idempotency_test.", "idempotency.") {
		t.Fatalf("%.200q: error %v, the reference's %v", body, gErr, wErr)
	}
	assert.Equal(t, w, g, "%.200q", body)
}

// referenceGitHubPartition is GitHubPartition as it decoded before
// internal/jsonscan: json.Unmarshal of the whole payload.
func referenceGitHubPartition(_ string, body []byte) (string, error) {
	type account struct {
		Login string `json:"login"`
	}
	var p struct {
		Organization account `json:"organization"`
		Repository   struct {
			Owner account `json:"owner"`
		} `json:"repository"`
		Installation struct {
			ID      json.Number `json:"id"`
			Account account     `json:"account"`
		} `json:"installation"`
		Sender account `json:"sender"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return "", fmt.Errorf("%w: %w", idempotency.ErrNoPartition, err)
	}
	login := ""
	switch {
	case p.Organization.Login != "":
		login = p.Organization.Login
	case p.Repository.Owner.Login != "":
		login = p.Repository.Owner.Login
	case p.Installation.Account.Login != "":
		login = p.Installation.Account.Login
	case p.Installation.ID != "":
		return "github/installation/" + p.Installation.ID.String(), nil
	case p.Sender.Login != "":
		login = p.Sender.Login
	default:
		return "github", nil
	}
	return "github/" + strings.ToLower(login), nil
}

// referenceJiraPartition is JiraPartition as it decoded before
// internal/jsonscan.
func referenceJiraPartition(_ string, body []byte) (string, error) {
	type self struct {
		Self string `json:"self"`
	}
	var p struct {
		Issue *struct {
			Self   string `json:"self"`
			Key    string `json:"key"`
			Fields *struct {
				Project *struct {
					Key  string `json:"key"`
					Self string `json:"self"`
				} `json:"project"`
			} `json:"fields"`
		} `json:"issue"`
		Comment *self `json:"comment"`
		Worklog *self `json:"worklog"`
		Project *struct {
			Key  string `json:"key"`
			Self string `json:"self"`
		} `json:"project"`
		User *self `json:"user"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return "", fmt.Errorf("%w: %w", idempotency.ErrNoPartition, err)
	}
	var selfURL, project string
	if p.Issue != nil {
		selfURL = p.Issue.Self
		if f := p.Issue.Fields; f != nil && f.Project != nil {
			project = f.Project.Key
			if selfURL == "" {
				selfURL = f.Project.Self
			}
		}
		if k, _, ok := strings.Cut(p.Issue.Key, "-"); project == "" && ok {
			project = k
		}
	}
	if p.Project != nil {
		if project == "" {
			project = p.Project.Key
		}
		if selfURL == "" {
			selfURL = p.Project.Self
		}
	}
	for _, s := range []*self{p.Comment, p.Worklog, p.User} {
		if selfURL == "" && s != nil {
			selfURL = s.Self
		}
	}
	u, err := url.Parse(selfURL)
	if selfURL == "" || err != nil || u.Host == "" {
		return "", fmt.Errorf("%w: no self URL names the Jira site", idempotency.ErrNoPartition)
	}
	key := "jira/" + strings.ToLower(u.Host)
	if project != "" {
		key += "/" + project
	}
	return key, nil
}
