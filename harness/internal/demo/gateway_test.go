package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/examples/devmetrics"
	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/idempotency/kafkapub"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestGatewayRealPayloads posts GitHub's example payloads of the event
// types the metrics read (JSON and form-encoded), its pings, Jira payloads
// and unnormalizable ones to the gateway binary (examples/gateway
// -pipeline devmetrics, as the demo runs it) on the kit's Kafka (Apache
// Kafka 4.4 unless EXACTLYONCE_KAFKA says otherwise) and reads the topic
// back: every delivery that counts is accepted 2xx and
// published once with its event-type header, and the processor's decode
// gives the event the gateway's normalization gave; pings and uncounted
// activities are answered 200 and not published; an unnormalizable payload
// is answered 422 with its reason and not published.
func TestGatewayRealPayloads(t *testing.T) {
	examples := githubExamples(t)
	brokers := testkit.Kafka(t)
	const topic = "gateway-real"
	testkit.CreateTopic(t, brokers, topic, 4)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	gw, err := StartGateway(ctx, binaries(t).Gateway,
		[]string{"-pipeline=devmetrics", "-brokers=" + strings.Join(brokers, ","), "-topic=" + topic, "-log-level=warn"},
		[]string{"GITHUB_WEBHOOK_SECRET=" + WebhookSecret, "JIRA_WEBHOOK_SECRET=" + WebhookSecret}, os.Stderr)
	require.NoError(t, err)
	defer func() { assert.NoError(t, gw.Stop()) }()
	p := &Provider{Client: &http.Client{Timeout: 10 * time.Second}, BaseURL: gw.URL()}

	want := map[string]devmetrics.Event{} // delivery id → the event its record must decode to
	post := func(d Delivery) int {
		t.Helper()
		status, _, _, err := p.post(ctx, d, 0)
		require.NoError(t, err)
		return status
	}
	n := 0
	for _, name := range []string{"pull_request", "pull_request_review", "pull_request_review_comment", "deployment_status", "ping"} {
		for _, ex := range examples[name] {
			bodies := [][]byte{ex.Body}
			if name == "pull_request" && ex.Action == "closed" {
				bodies = append(bodies, mergedVariant(t, ex.Body, "2019-05-15T16:00:00Z"))
			}
			for _, body := range bodies {
				for _, form := range []bool{false, true} {
					n++
					d := Delivery{Provider: "github", ID: fmt.Sprintf("gh-%d", n), EventType: name, Body: body, Form: form}
					ev, nerr := devmetrics.Normalize("github", name, d.ID, body)
					status := post(d)
					if nerr != nil {
						assert.Equal(t, http.StatusOK, status, "%s %s: counts nothing, answered 200 unpublished", name, ex.Action)
						continue
					}
					assert.Equal(t, http.StatusAccepted, status, "%s %s form=%t", name, ex.Action, form)
					want[d.ID] = ev
				}
			}
		}
	}
	for i, body := range [][]byte{
		jiraBody(t, "jira:issue_created", "Incident", false, nil),
		jiraBody(t, "jira:issue_updated", "Incident", true, nil),
		jiraBody(t, "jira:issue_updated", "Story", true, nil),
	} {
		var h struct {
			WebhookEvent string `json:"webhookEvent"`
		}
		require.NoError(t, json.Unmarshal(body, &h))
		d := Delivery{Provider: "jira", ID: fmt.Sprintf("jira-%d", i), EventType: h.WebhookEvent, Body: body}
		ev, err := devmetrics.Normalize("jira", d.EventType, d.ID, body)
		require.NoError(t, err)
		status := post(d)
		assert.Equal(t, http.StatusAccepted, status, "jira %d", i)
		want[d.ID] = ev
	}

	// Unnormalizable: 422 with the reason, nothing published.
	var review []byte
	for _, ex := range examples["pull_request_review"] {
		if ex.Action == "submitted" {
			review = ex.Body
		}
	}
	var bad map[string]any
	require.NoError(t, json.Unmarshal(review, &bad))
	delete(bad["review"].(map[string]any), "submitted_at")
	badBody, err := json.Marshal(bad)
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, gw.URL()+"/webhooks/github", bytesReader(badBody))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(idempotency.HeaderGitHubEvent, "pull_request_review")
	req.Header.Set(idempotency.HeaderGitHubDelivery, "gh-bad")
	req.Header.Set(idempotency.HeaderGitHubSignature, idempotency.SignGitHub([]byte(WebhookSecret), badBody))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	reason, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode)
	assert.Contains(t, string(reason), "submitted_at")

	// The topic: one record per accepted delivery, none for the others.
	got := map[string]devmetrics.Event{}
	for part := range 4 {
		for _, m := range testkit.ReadTopic(t, brokers, topic, part) {
			md, err := kafkapub.ReadMetadata(m)
			require.NoError(t, err)
			assert.NotEmpty(t, md.EventType, "record %d/%d has an event-type header", part, m.Offset)
			ev, err := devmetrics.Decode(m)
			require.NoError(t, err)
			_, dup := got[md.EventID]
			assert.False(t, dup, "delivery %s published twice", md.EventID)
			got[md.EventID] = ev
			assert.Equal(t, []byte(ev.OrgID), m.Key, "partition key is the organisation")
		}
	}
	assert.Equal(t, want, got)
	assert.Greater(t, len(want), 20)
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }
