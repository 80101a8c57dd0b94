package idempotency

import (
	"fmt"
	"strings"
)

// Tenant is a partition key of the provider presets, split into its parts:
// what GitHubPartition and JiraPartition return, and kafkapub writes as the
// Kafka message key.
type Tenant struct {
	Provider string // "github" or "jira"
	// Account is the GitHub login (lower-cased) or the Jira site's host;
	// empty for a GitHub event of no account.
	Account string
	// Installation is the GitHub App installation id when the event names
	// no account but an installation.
	Installation string
	// Project is the Jira project key; empty for events without a project.
	Project string
}

// String returns the key ParseTenant reads.
func (t Tenant) String() string {
	switch {
	case t.Provider == "github" && t.Installation != "":
		return "github/installation/" + t.Installation
	case t.Account == "":
		return t.Provider
	case t.Project != "":
		return t.Provider + "/" + t.Account + "/" + t.Project
	}
	return t.Provider + "/" + t.Account
}

// ParseTenant splits a partition key of the GitHub or Jira preset:
// "github/<login>", "github/installation/<id>", "github", "jira/<site
// host>" or "jira/<site host>/<project key>". Any other key returns an
// error wrapping ErrNoPartition.
func ParseTenant(key string) (Tenant, error) {
	parts := strings.Split(key, "/")
	bad := func() (Tenant, error) {
		return Tenant{}, fmt.Errorf("%w: %q is not a key of the GitHub or Jira preset (github/<login>, github/installation/<id>, jira/<site>[/<project>])", ErrNoPartition, key)
	}
	for _, p := range parts[1:] {
		if p == "" {
			return bad()
		}
	}
	switch {
	case parts[0] == "github" && len(parts) == 1:
		return Tenant{Provider: "github"}, nil
	case parts[0] == "github" && len(parts) == 2:
		return Tenant{Provider: "github", Account: parts[1]}, nil
	case parts[0] == "github" && len(parts) == 3 && parts[1] == "installation":
		return Tenant{Provider: "github", Installation: parts[2]}, nil
	case parts[0] == "jira" && len(parts) == 2:
		return Tenant{Provider: "jira", Account: parts[1]}, nil
	case parts[0] == "jira" && len(parts) == 3:
		return Tenant{Provider: "jira", Account: parts[1], Project: parts[2]}, nil
	}
	return bad()
}
