package devmetrics

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Normalized event types: the articles' event, one per provider activity
// the per-employee metrics consume.
const (
	TypePRMerged             = "pr.merged"             // GitHub pull_request closed with merged
	TypeReview               = "review.submitted"      // GitHub pull_request_review submitted
	TypeReviewComment        = "review.comment"        // GitHub pull_request_review_comment created
	TypeDeployment           = "deployment"            // GitHub deployment_status success
	TypeIncidentOpened       = "incident.opened"       // Jira issue of type Incident created
	TypeIncidentTransitioned = "incident.transitioned" // Jira Incident moved to another status
	TypeIssueTransitioned    = "issue.transitioned"    // Jira issue (not an Incident) moved to another status
)

// Event is the articles' normalized event: what the stream processor
// aggregates and what normalized_events stores, one per provider delivery.
//
// The employee of each event, the person the per-employee metrics credit:
//   - pr.merged: the pull request's author (pull_request.user), whose work
//     was merged, not who pressed merge (merged_by) nor the hook's sender.
//   - review.submitted: the reviewer (review.user). LatencyS is the time
//     from the pull request's creation to the review's submission.
//   - review.comment: the comment's author (comment.user).
//   - deployment: who created the deployment (deployment.creator), not the
//     status's creator (often a bot, as in GitHub's own examples).
//   - incident.opened, incident.transitioned: the incident's reporter
//     (issue.fields.reporter), so that later transitions by on-call staff
//     stay attributed to the incident they belong to.
//   - issue.transitioned: who moved the issue (the payload's user).
//
// GitHub employees are logins, Jira employees account ids: mapping one
// person's identities across providers is the application's business.
// Time is always the event's time from the payload (merged_at,
// submitted_at, created_at, Jira's timestamp), never the receive time, so a
// delivery retried hours later lands in the right window.
type Event struct {
	OrgID      string    `json:"org_id"`
	Source     string    `json:"source"`
	EventID    string    `json:"event_id"` // the provider's delivery id
	Type       string    `json:"type"`
	EmployeeID string    `json:"employee_id"`
	Time       time.Time `json:"time"`
	LatencyS   float64   `json:"latency_s"` // review.submitted only
	// Subject is what the event is about: "owner/repo#42" for pull
	// requests, the deployment id, the Jira issue key. It keys the
	// deployments and incidents tables.
	Subject string `json:"subject"`
	// Status is the deployment state or the issue's new status.
	Status string `json:"status"`
	// Opened is when the subject was created: the pull request (reviews),
	// the incident (incident events).
	Opened time.Time `json:"opened"`
}

// ErrNotCounted is wrapped by Normalize's error for a valid delivery of an activity the metrics do not count
// (a pull request opened, a comment edited, a deployment in progress). Check
// answers it 200 without publishing it.
var ErrNotCounted = errors.New("devmetrics: not counted by the per-employee metrics")

// NormalizeError says why a delivery cannot be normalized: a payload that
// lacks a field its event type always has. The gateway answers it 422 with
// the reason and publishes nothing; the processor sends such a record to
// its dead-letter topic.
type NormalizeError struct {
	Source, EventType, Reason string
}

func (e *NormalizeError) Error() string {
	return fmt.Sprintf("cannot normalize %s %s delivery: %s", e.Source, e.EventType, e.Reason)
}

// Normalize turns one provider delivery into the articles' event. It
// returns an error wrapping ErrNotCounted for an activity the metrics do not
// count, and a *NormalizeError for a payload it cannot read.
func Normalize(source, eventType, deliveryID string, body []byte) (Event, error) {
	if deliveryID == "" {
		return Event{}, &NormalizeError{source, eventType, "no delivery id"}
	}
	var (
		ev  Event
		err error
	)
	switch source {
	case "github":
		ev, err = normalizeGitHub(eventType, body)
	case "jira":
		ev, err = normalizeJira(eventType, body)
	default:
		return Event{}, &NormalizeError{source, eventType, "unknown source"}
	}
	if err != nil {
		var nerr *NormalizeError
		if errors.As(err, &nerr) {
			nerr.Source, nerr.EventType = source, eventType
		}
		return Event{}, err
	}
	ev.Source, ev.EventID = source, deliveryID
	return ev, nil
}

func reject(format string, a ...any) error {
	return &NormalizeError{Reason: fmt.Sprintf(format, a...)}
}

type ghUser struct {
	Login string `json:"login"`
}

type ghPayload struct {
	Action       string  `json:"action"`
	Organization *ghUser `json:"organization"`
	Repository   *struct {
		FullName string  `json:"full_name"`
		Owner    *ghUser `json:"owner"`
	} `json:"repository"`
	PullRequest *struct {
		Number    int     `json:"number"`
		User      *ghUser `json:"user"`
		CreatedAt string  `json:"created_at"`
		Merged    bool    `json:"merged"`
		MergedAt  *string `json:"merged_at"`
	} `json:"pull_request"`
	Review *struct {
		User        *ghUser `json:"user"`
		SubmittedAt *string `json:"submitted_at"`
		State       string  `json:"state"`
	} `json:"review"`
	Comment *struct {
		User      *ghUser `json:"user"`
		CreatedAt string  `json:"created_at"`
	} `json:"comment"`
	Deployment *struct {
		ID      json.Number `json:"id"`
		Creator *ghUser     `json:"creator"`
	} `json:"deployment"`
	DeploymentStatus *struct {
		State     string `json:"state"`
		CreatedAt string `json:"created_at"`
	} `json:"deployment_status"`
}

// githubOrg is the organisation of a GitHub event: the organization's login,
// else the repository owner's, lower-cased as GitHub compares them, and as
// idempotency.GitHubPartition keys the Kafka partition.
func githubOrg(p *ghPayload) (string, error) {
	switch {
	case p.Organization != nil && p.Organization.Login != "":
		return strings.ToLower(p.Organization.Login), nil
	case p.Repository != nil && p.Repository.Owner != nil && p.Repository.Owner.Login != "":
		return strings.ToLower(p.Repository.Owner.Login), nil
	}
	return "", reject("no organization and no repository owner")
}

func login(u *ghUser, what string) (string, error) {
	if u == nil || u.Login == "" {
		return "", reject("no %s login", what)
	}
	return u.Login, nil
}

func githubTime(s, what string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, reject("%s %q is not an RFC 3339 time", what, s)
	}
	return t.UTC(), nil
}

func normalizeGitHub(eventType string, body []byte) (Event, error) {
	switch eventType {
	case "pull_request", "pull_request_review", "pull_request_review_comment", "deployment_status":
	default:
		return Event{}, fmt.Errorf("%w: GitHub event %q", ErrNotCounted, eventType)
	}
	var p ghPayload
	if err := json.Unmarshal(body, &p); err != nil {
		return Event{}, reject("payload: %v", err)
	}
	org, err := githubOrg(&p)
	if err != nil {
		return Event{}, err
	}
	ev := Event{OrgID: org}
	pr := p.PullRequest
	if eventType != "deployment_status" && (pr == nil || p.Repository == nil) {
		return Event{}, reject("no pull_request or repository")
	}
	if pr != nil && p.Repository != nil {
		ev.Subject = p.Repository.FullName + "#" + strconv.Itoa(pr.Number)
	}
	switch eventType {
	case "pull_request":
		if p.Action != "closed" || !pr.Merged {
			return Event{}, fmt.Errorf("%w: pull_request %s (merged %t)", ErrNotCounted, p.Action, pr.Merged)
		}
		ev.Type = TypePRMerged
		if ev.EmployeeID, err = login(pr.User, "pull_request.user"); err != nil {
			return Event{}, err
		}
		if pr.MergedAt == nil {
			return Event{}, reject("merged pull request without merged_at")
		}
		ev.Time, err = githubTime(*pr.MergedAt, "pull_request.merged_at")
	case "pull_request_review":
		if p.Action != "submitted" {
			return Event{}, fmt.Errorf("%w: pull_request_review %s", ErrNotCounted, p.Action)
		}
		if p.Review == nil || p.Review.SubmittedAt == nil {
			return Event{}, reject("no review.submitted_at")
		}
		ev.Type = TypeReview
		ev.Status = p.Review.State
		if ev.EmployeeID, err = login(p.Review.User, "review.user"); err != nil {
			return Event{}, err
		}
		if ev.Time, err = githubTime(*p.Review.SubmittedAt, "review.submitted_at"); err != nil {
			return Event{}, err
		}
		if ev.Opened, err = githubTime(pr.CreatedAt, "pull_request.created_at"); err != nil {
			return Event{}, err
		}
		if ev.Time.Before(ev.Opened) {
			return Event{}, reject("review submitted at %s before its pull request was created at %s", ev.Time, ev.Opened)
		}
		ev.LatencyS = ev.Time.Sub(ev.Opened).Seconds()
	case "pull_request_review_comment":
		if p.Action != "created" {
			return Event{}, fmt.Errorf("%w: pull_request_review_comment %s", ErrNotCounted, p.Action)
		}
		if p.Comment == nil {
			return Event{}, reject("no comment")
		}
		ev.Type = TypeReviewComment
		if ev.EmployeeID, err = login(p.Comment.User, "comment.user"); err != nil {
			return Event{}, err
		}
		ev.Time, err = githubTime(p.Comment.CreatedAt, "comment.created_at")
	case "deployment_status":
		if p.Deployment == nil || p.DeploymentStatus == nil {
			return Event{}, reject("no deployment or deployment_status")
		}
		if p.DeploymentStatus.State != "success" {
			return Event{}, fmt.Errorf("%w: deployment_status %s", ErrNotCounted, p.DeploymentStatus.State)
		}
		if p.Deployment.ID == "" {
			return Event{}, reject("no deployment.id")
		}
		ev.Type, ev.Subject, ev.Status = TypeDeployment, p.Deployment.ID.String(), p.DeploymentStatus.State
		if ev.EmployeeID, err = login(p.Deployment.Creator, "deployment.creator"); err != nil {
			return Event{}, err
		}
		ev.Time, err = githubTime(p.DeploymentStatus.CreatedAt, "deployment_status.created_at")
	}
	if err != nil {
		return Event{}, err
	}
	return ev, nil
}

type jiraUser struct {
	AccountID string `json:"accountId"`
}

type jiraPayload struct {
	Timestamp    *int64    `json:"timestamp"`
	WebhookEvent string    `json:"webhookEvent"`
	User         *jiraUser `json:"user"`
	Issue        *struct {
		Key    string `json:"key"`
		Self   string `json:"self"`
		Fields *struct {
			IssueType *struct {
				Name string `json:"name"`
			} `json:"issuetype"`
			Reporter *jiraUser `json:"reporter"`
			Created  string    `json:"created"`
			Status   *struct {
				Name string `json:"name"`
			} `json:"status"`
		} `json:"fields"`
	} `json:"issue"`
	Changelog *struct {
		Items []struct {
			Field    string `json:"field"`
			ToString string `json:"toString"`
		} `json:"items"`
	} `json:"changelog"`
}

// jiraTimeLayout is how Jira's REST API writes times: milliseconds and a
// zone offset without colon.
const jiraTimeLayout = "2006-01-02T15:04:05.000-0700"

func normalizeJira(eventType string, body []byte) (Event, error) {
	switch eventType {
	case "jira:issue_created", "jira:issue_updated":
	default:
		return Event{}, fmt.Errorf("%w: Jira event %q", ErrNotCounted, eventType)
	}
	var p jiraPayload
	if err := json.Unmarshal(body, &p); err != nil {
		return Event{}, reject("payload: %v", err)
	}
	if p.WebhookEvent != eventType {
		return Event{}, reject("webhookEvent %q does not match the event type", p.WebhookEvent)
	}
	if p.Timestamp == nil {
		return Event{}, reject("no timestamp")
	}
	iss := p.Issue
	if iss == nil || iss.Key == "" || iss.Fields == nil || iss.Fields.IssueType == nil {
		return Event{}, reject("no issue key, fields or issuetype")
	}
	// The organisation is the Jira site, from the issue's self URL.
	u, err := url.Parse(iss.Self)
	if err != nil || u.Host == "" {
		return Event{}, reject("issue.self %q names no Jira site", iss.Self)
	}
	ev := Event{OrgID: strings.ToLower(u.Host), Subject: iss.Key, Time: time.UnixMilli(*p.Timestamp).UTC()}
	incident := strings.EqualFold(iss.Fields.IssueType.Name, "Incident")
	if iss.Fields.Status != nil {
		ev.Status = iss.Fields.Status.Name
	}
	transitioned := false
	if p.Changelog != nil {
		for _, it := range p.Changelog.Items {
			if it.Field == "status" {
				transitioned, ev.Status = true, it.ToString
			}
		}
	}
	switch {
	case incident && (eventType == "jira:issue_created" || transitioned):
		ev.Type = TypeIncidentOpened
		if eventType == "jira:issue_updated" {
			ev.Type = TypeIncidentTransitioned
		}
		if iss.Fields.Reporter == nil || iss.Fields.Reporter.AccountID == "" {
			return Event{}, reject("incident without reporter accountId")
		}
		ev.EmployeeID = iss.Fields.Reporter.AccountID
		if ev.Opened, err = time.Parse(jiraTimeLayout, iss.Fields.Created); err != nil {
			return Event{}, reject("issue.fields.created %q: %v", iss.Fields.Created, err)
		}
		ev.Opened = ev.Opened.UTC()
	case transitioned:
		ev.Type = TypeIssueTransitioned
		if p.User == nil || p.User.AccountID == "" {
			return Event{}, reject("status transition without user accountId")
		}
		ev.EmployeeID = p.User.AccountID
	default:
		return Event{}, fmt.Errorf("%w: %s of a %s without status transition", ErrNotCounted, eventType, iss.Fields.IssueType.Name)
	}
	return ev, nil
}
