package idempotency_test

import (
	"os"
	"path/filepath"
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
// json.Unmarshal of the whole payload (export_test.go).

func TestPartitionsMatchReference(t *testing.T) {
	examples := webhookkit.GitHubExamples(t)
	for _, ex := range examples {
		assertSamePartition(t, ex.Body, idempotency.GitHubPartition, idempotency.ReferenceGitHubPartition)
		assertSamePartition(t, ex.Body, idempotency.JiraPartition, idempotency.ReferenceJiraPartition)
	}
	files, err := filepath.Glob("testdata/jira/*.json")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		assertSamePartition(t, b, idempotency.JiraPartition, idempotency.ReferenceJiraPartition)
		assertSamePartition(t, b, idempotency.GitHubPartition, idempotency.ReferenceGitHubPartition)
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
		assertSamePartition(t, b, idempotency.GitHubPartition, idempotency.ReferenceGitHubPartition)
		assertSamePartition(t, b, idempotency.JiraPartition, idempotency.ReferenceJiraPartition)
	})
}

func assertSamePartition(t *testing.T, body []byte, got, want func(string, []byte) (string, error)) {
	t.Helper()
	g, gErr := got("", body)
	w, wErr := want("", body)
	if (gErr == nil) != (wErr == nil) || gErr != nil && gErr.Error() != wErr.Error() {
		t.Fatalf("%.200q: error %v, the reference's %v", body, gErr, wErr)
	}
	assert.Equal(t, w, g, "%.200q", body)
}
