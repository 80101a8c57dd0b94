package idempotency

import (
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/exactlyonce/exactlyonce/internal/jsonscan"
)

// Header names GitHub and Jira Cloud send with a webhook, beside
// HeaderGitHubDelivery, HeaderGitHubSignature and HeaderJiraWebhookID.
const (
	// HeaderGitHubEvent carries the GitHub event type ("push",
	// "pull_request", "ping").
	HeaderGitHubEvent = "X-GitHub-Event"
	// HeaderGitHubHookID carries the id of the GitHub webhook that sent the
	// delivery: the id the redeliverer lists deliveries of.
	HeaderGitHubHookID = "X-GitHub-Hook-ID"
	// HeaderJiraSignature carries "sha256=" and the hex HMAC-SHA256 of the
	// body, sent by Jira Cloud for webhooks registered with a secret.
	HeaderJiraSignature = "X-Hub-Signature"
	// HeaderJiraRetry carries how many times Jira Cloud has retried the
	// delivery; absent on the first attempt.
	HeaderJiraRetry = "X-Atlassian-Webhook-Retry"
)

// Provider describes how one webhook provider sends its deliveries: where
// the delivery id, the signature and the event type are, and which payload
// field says which tenant an event belongs to. [GitHub] and [JiraCloud]
// return the presets; a custom provider sets the fields it has.
//
// A Handler needs a Provider (or an explicit Options.Key): the zero Options
// refuse to start rather than read GitHub's headers on a Jira endpoint.
type Provider struct {
	// Name is the Delivery.Source of its deliveries ("github", "jira").
	Name string
	// KeyHeader carries the delivery id, the same on every retry or
	// redelivery of one event.
	KeyHeader string
	// SignatureHeader carries "sha256=<hex HMAC-SHA256 of the raw body>"
	// when the webhook has a secret (Options.Secret).
	SignatureHeader string
	// EventHeader names the header that carries the event type; EventField
	// the top-level string field of the JSON body that does, when the
	// provider puts it there (Jira's "webhookEvent"). A delivery without
	// it is rejected with 400.
	EventHeader string
	EventField  string
	// HookIDHeader carries the id of the webhook registration, if the
	// provider sends one.
	HookIDHeader string
	// RetryHeader carries the provider's retry count, if it sends one.
	RetryHeader string
	// ContentTypes are the media types the provider sends a body as; a
	// request of another type (or of none, or with a charset other than
	// UTF-8) is answered 415 after its signature is checked, claims
	// nothing and publishes nothing. Empty: any type, read as JSON
	// (or as a form when FormEncoded and the type says so).
	ContentTypes []string
	// FormEncoded accepts application/x-www-form-urlencoded bodies of the
	// form payload=<url-encoded JSON>, as GitHub sends when a webhook's
	// content type is "form" (the REST API's default). The signature is
	// checked over the body as sent; the decoded JSON is what is
	// fingerprinted and published.
	FormEncoded bool
	// Ignore lists event types that are health checks, not events
	// (GitHub's "ping"): answered 200 and never published.
	Ignore []string
	// Partition returns the tenant an event belongs to, used as its Kafka
	// partition key so that every event of one tenant lands on one
	// partition (see Delivery.Partition). Nil: no partition key.
	Partition func(event string, body []byte) (string, error)
}

// GitHub returns the preset of GitHub webhooks (repository, organization
// and GitHub App hooks): delivery id in X-GitHub-Delivery, signature in
// X-Hub-Signature-256, event type in X-GitHub-Event, hook id in
// X-GitHub-Hook-ID, JSON or form-encoded bodies, "ping" ignored, and
// [GitHubPartition] as the partition key.
//
// GitHub never retries a failed delivery on its own: a delivery answered
// non-2xx, or not answered within 10 s, stays failed until someone
// redelivers it, by hand or through the REST API, within 3 days. Package
// githubredeliver does that.
func GitHub() Provider {
	return Provider{
		Name:            "github",
		KeyHeader:       HeaderGitHubDelivery,
		SignatureHeader: HeaderGitHubSignature,
		EventHeader:     HeaderGitHubEvent,
		HookIDHeader:    HeaderGitHubHookID,
		ContentTypes:    []string{"application/json", "application/x-www-form-urlencoded"},
		FormEncoded:     true,
		Ignore:          []string{"ping"},
		Partition:       GitHubPartition,
	}
}

// JiraCloud returns the preset of Jira Cloud webhooks: delivery id in
// X-Atlassian-Webhook-Identifier (unchanged across retries), signature in
// X-Hub-Signature (webhooks registered with a secret), event type in the
// body's "webhookEvent" field, retry count in X-Atlassian-Webhook-Retry, and
// [JiraPartition] as the partition key.
//
// Jira Cloud retries a delivery answered 408, 409, 425, 429 or 5xx, or not
// answered in time, for up to about 30 minutes; any other answer is final.
func JiraCloud() Provider {
	return Provider{
		Name:            "jira",
		KeyHeader:       HeaderJiraWebhookID,
		SignatureHeader: HeaderJiraSignature,
		EventField:      "webhookEvent",
		ContentTypes:    []string{"application/json"},
		RetryHeader:     HeaderJiraRetry,
		Partition:       JiraPartition,
	}
}

// gitHubPartitionFields and jiraPartitionFields name every member the
// partition functions' structs decode: jsonscan reads a payload (a
// pull_request event is 28 KB) once and hands json.Unmarshal only these,
// with the same result (internal/jsonscan's guarantees; the partition
// tests compare with plain json.Unmarshal over GitHub's examples).
var (
	gitHubPartitionFields = jsonscan.Fields{
		"organization": {"login": nil},
		"repository":   {"owner": {"login": nil}},
		"installation": {"id": nil, "account": {"login": nil}},
		"sender":       {"login": nil},
	}
	jiraPartitionFields = jsonscan.Fields{
		"issue":   {"self": nil, "key": nil, "fields": {"project": {"key": nil, "self": nil}}},
		"comment": {"self": nil},
		"worklog": {"self": nil},
		"project": {"key": nil, "self": nil},
		"user":    {"self": nil},
	}
)

// GitHubPartition returns the account a GitHub event belongs to:
// "github/<login>" of the organization, else of the repository's owner,
// else of the installation's account, then "github/installation/<id>", else
// the sender's login. Logins are unique across users and organizations, and
// GitHub compares them without case, so they are lower-cased. It fails with
// ErrNoPartition when the payload has none of these.
func GitHubPartition(_ string, body []byte) (string, error) {
	return gitHubPartition(func(v any) error { return jsonscan.Unmarshal(body, v, gitHubPartitionFields) })
}

// gitHubPartition is GitHubPartition over a payload that decode decodes
// into v. The tests also give it the decoding it replaced, json.Unmarshal
// of the whole payload, and compare.
func gitHubPartition(decode func(v any) error) (string, error) {
	type account struct {
		Login string `json:"login"`
	}
	// Values, not pointers: nothing is allocated for absent fields.
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
	if err := decode(&p); err != nil {
		return "", fmt.Errorf("%w: %w", ErrNoPartition, err)
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

// JiraPartition returns the Jira site and project an event belongs to:
// "jira/<site host>/<project key>", the host taken from the "self" URL of
// the issue (or of the comment, worklog or project), the project from the
// issue's fields.project.key, else the prefix of its key ("ENG-12" gives
// "ENG"), else the project of a project event. Events without a project
// (user or board events) are keyed by site alone. It fails with
// ErrNoPartition when no "self" URL names the site.
func JiraPartition(_ string, body []byte) (string, error) {
	return jiraPartition(func(v any) error { return jsonscan.Unmarshal(body, v, jiraPartitionFields) })
}

// jiraPartition is JiraPartition over a payload that decode decodes into v
// (see gitHubPartition).
func jiraPartition(decode func(v any) error) (string, error) {
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
	if err := decode(&p); err != nil {
		return "", fmt.Errorf("%w: %w", ErrNoPartition, err)
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
		return "", fmt.Errorf("%w: no self URL names the Jira site", ErrNoPartition)
	}
	key := "jira/" + strings.ToLower(u.Host)
	if project != "" {
		key += "/" + project
	}
	return key, nil
}

// checkContentType refuses a request whose Content-Type is not one of
// p.ContentTypes, with ErrMediaType.
func (p Provider) checkContentType(h http.Header) error {
	if len(p.ContentTypes) == 0 {
		return nil
	}
	v := h.Get("Content-Type")
	ct, params, err := mime.ParseMediaType(v)
	if err != nil {
		return fmt.Errorf("%w: %q; want %s", ErrMediaType, v, strings.Join(p.ContentTypes, " or "))
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return fmt.Errorf("%w: charset %q; want utf-8", ErrMediaType, cs)
	}
	for _, want := range p.ContentTypes {
		if ct == want {
			return nil
		}
	}
	return fmt.Errorf("%w: %q; want %s", ErrMediaType, ct, strings.Join(p.ContentTypes, " or "))
}

// decodeBody returns the JSON payload of a body: the body itself, or, for a
// form-encoded body of a provider that sends them, its "payload" field.
func (p Provider) decodeBody(h http.Header, raw []byte) ([]byte, error) {
	if !p.FormEncoded {
		return raw, nil
	}
	ct, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	if err != nil || ct != "application/x-www-form-urlencoded" {
		return raw, nil
	}
	form, err := url.ParseQuery(string(raw))
	if err != nil {
		return nil, fmt.Errorf("%w: form body: %w", ErrMalformed, err)
	}
	payload, ok := form["payload"]
	if !ok || len(payload) != 1 {
		return nil, fmt.Errorf("%w: form body needs exactly one payload field", ErrMalformed)
	}
	return []byte(payload[0]), nil
}

// metadata fills d's Event, HookID and Retry from the request.
func (p Provider) metadata(h http.Header, d *Delivery) error {
	switch {
	case p.EventHeader != "":
		d.Event = h.Get(p.EventHeader)
		if d.Event == "" {
			return fmt.Errorf("%w: header %s is missing", ErrMalformed, p.EventHeader)
		}
	case p.EventField != "":
		var v map[string]json.RawMessage
		if err := jsonscan.Unmarshal(d.Body, &v, jsonscan.Fields{p.EventField: nil}); err != nil {
			return fmt.Errorf("%w: %w", ErrMalformed, err)
		}
		if raw, ok := v[p.EventField]; !ok || json.Unmarshal(raw, &d.Event) != nil || d.Event == "" {
			return fmt.Errorf("%w: body field %q is missing or not a string", ErrMalformed, p.EventField)
		}
	}
	if p.HookIDHeader != "" {
		d.HookID = h.Get(p.HookIDHeader)
	}
	if p.RetryHeader != "" {
		if s := h.Get(p.RetryHeader); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				return fmt.Errorf("%w: header %s is %q", ErrMalformed, p.RetryHeader, s)
			}
			d.Retry = n
		}
	}
	return nil
}
