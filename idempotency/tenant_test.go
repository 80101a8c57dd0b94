package idempotency_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/idempotency"
)

// ParseTenant reads back every kind of key the presets produce, from the
// presets' own output, and refuses others.
func TestParseTenant(t *testing.T) {
	tests := []struct {
		provider idempotency.Provider
		body     string
		want     idempotency.Tenant
	}{
		{idempotency.GitHub(), `{"organization":{"login":"Acme"}}`, idempotency.Tenant{Provider: "github", Account: "acme"}},
		{idempotency.GitHub(), `{"installation":{"id":42}}`, idempotency.Tenant{Provider: "github", Installation: "42"}},
		{idempotency.GitHub(), `{}`, idempotency.Tenant{Provider: "github"}},
		{idempotency.JiraCloud(), `{"issue":{"self":"https://acme.atlassian.net/rest/api/2/issue/1","key":"ENG-12"}}`,
			idempotency.Tenant{Provider: "jira", Account: "acme.atlassian.net", Project: "ENG"}},
		{idempotency.JiraCloud(), `{"user":{"self":"https://acme.atlassian.net/rest/api/2/user?accountId=1"}}`,
			idempotency.Tenant{Provider: "jira", Account: "acme.atlassian.net"}},
	}
	for _, tt := range tests {
		key, err := tt.provider.Partition("", []byte(tt.body))
		require.NoError(t, err, tt.body)
		got, err := idempotency.ParseTenant(key)
		require.NoError(t, err, key)
		assert.Equal(t, tt.want, got, key)
		assert.Equal(t, key, got.String())
	}
	for _, bad := range []string{"", "gitlab/acme", "github/", "github/installation/", "jira", "jira//ENG", "jira/a/b/c"} {
		_, err := idempotency.ParseTenant(bad)
		assert.ErrorIs(t, err, idempotency.ErrNoPartition, bad)
	}
}
