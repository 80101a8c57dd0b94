package demo

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/exactlyonce/exactlyonce/internal/embedded"
)

// GitHub's maintained webhook examples: the payloads the demo's simulated
// GitHub sends are built from them, and the normalizer is tested on every
// one. `make deps` fetches them with npm pack into the cache (the same file
// testkit/webhookkit reads for the library's tests); without it this does so
// once, under the same lock. Never committed.
const (
	octokitPackage = "@octokit/webhooks-examples"
	octokitVersion = "7.6.1"
)

// githubExample is one example payload of one event type.
type githubExample struct {
	Event  string
	Action string
	Body   json.RawMessage
}

// LoadGitHubExamples returns every example payload of api.github.com, by
// event type, fetching the package into the cache first if needed.
func LoadGitHubExamples(ctx context.Context) (map[string][]githubExample, error) {
	tgz, err := embedded.NpmPack(ctx, embedded.OctokitDir, octokitPackage, octokitVersion)
	if err != nil {
		return nil, err
	}
	b, err := embedded.ReadTarFile(tgz, "package/api.github.com/index.json")
	if err != nil {
		return nil, err
	}
	var index []struct {
		Name     string            `json:"name"`
		Examples []json.RawMessage `json:"examples"`
	}
	if err := json.Unmarshal(b, &index); err != nil {
		return nil, fmt.Errorf("%s: index.json: %w", tgz, err)
	}
	out := map[string][]githubExample{}
	for _, e := range index {
		for _, raw := range e.Examples {
			var a struct {
				Action string `json:"action"`
			}
			_ = json.Unmarshal(raw, &a)
			out[e.Name] = append(out[e.Name], githubExample{Event: e.Name, Action: a.Action, Body: raw})
		}
	}
	return out, nil
}
