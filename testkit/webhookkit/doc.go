// Package webhookkit hands tests real webhook payloads: GitHub's own
// example deliveries and signatures (from @octokit/webhooks-examples and
// @octokit/webhooks-methods, fetched with npm into the cache) and Jira
// Cloud issue events as Atlassian documents them.
//
//	for _, ex := range webhookkit.GitHubExamples(t) { ... ex.Event, ex.Body ... }
//	sigs := webhookkit.OctokitSign(t, secret, payloads) // X-Hub-Signature-256 values
//	body := webhookkit.JiraIssueBody(t, "jira:issue_updated", "Bug", true, nil)
//
// It also sends them as the provider does: a Delivery carries the headers
// of its idempotency preset (GitHub, JiraCloud: delivery id, event type,
// signature by Provider.Sign, retry count) around a body, and Send sends it
// to a gateway, a real idempotency.Handler or yours, and returns the whole
// answer; it only returns errors, so any goroutine may call it (Post, the
// status only, fails the test instead). Gateway starts the gateway of
// examples/gateway for the test in one call:
//
//	url := webhookkit.Gateway(t, brokers, topic, webhookkit.GatewayOptions{Provider: idempotency.JiraCloud(), Secret: secret})
//	d := webhookkit.Delivery{Provider: idempotency.JiraCloud(), ID: "j-1", Body: body, Secret: secret}
//	a, err := webhookkit.Send(ctx, url, d) // a.Status, a.Header, a.Body
//	d.Retry = 1 // Jira's retry of it: same id, X-Atlassian-Webhook-Retry; a.Replayed() once done
//
// # Guarantees
//
// The payloads are the upstream packages' at pinned versions, never
// committed here. Without npm (or node, for OctokitSign) the test is
// skipped, or fails when CI=true, as with every server testkit starts.
package webhookkit
