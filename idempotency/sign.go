package idempotency

// SignJira returns the X-Hub-Signature value of body under secret: what
// Jira Cloud sends for a webhook with a secret ("sha256=" and the hex
// HMAC-SHA256, the scheme GitHub uses). It is meant for tests and for
// clients of the gateway.
func SignJira(secret, body []byte) string { return SignGitHub(secret, body) }

// Sign returns the value of p.SignatureHeader for body under secret, as the
// provider computes it: every preset signs "sha256=<hex HMAC-SHA256>".
func (p Provider) Sign(secret, body []byte) string { return SignGitHub(secret, body) }
