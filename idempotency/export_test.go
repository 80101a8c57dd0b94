package idempotency

import "encoding/json"

// ReferenceGitHubPartition and ReferenceJiraPartition are the partition
// functions with the decoding they had before internal/jsonscan:
// json.Unmarshal of the whole payload.
func ReferenceGitHubPartition(_ string, body []byte) (string, error) {
	return gitHubPartition(func(v any) error { return json.Unmarshal(body, v) })
}

func ReferenceJiraPartition(_ string, body []byte) (string, error) {
	return jiraPartition(func(v any) error { return json.Unmarshal(body, v) })
}
