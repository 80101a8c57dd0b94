package kafkapub_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/idempotency/kafkapub"
	"github.com/exactlyonce/exactlyonce/idempotency/redisstore"
	"github.com/exactlyonce/exactlyonce/testkit"
	"github.com/exactlyonce/exactlyonce/testkit/webhookkit"
)

// Every example payload of every event type of GitHub's maintained
// @octokit/webhooks-examples, signed by GitHub's own signer
// (@octokit/webhooks-methods), is posted to the Handler with the GitHub
// preset, the Redis store and a publisher to real Kafka (kfake):
//
//   - each accepted delivery is answered 2xx and published exactly once,
//     with its event type, source and hook id headers and its partition key;
//   - pings are answered 2xx and not published;
//   - every fifth delivery is form-encoded, as GitHub sends for hooks with
//     the "form" content type, and is published as its JSON;
//   - a redelivery is replayed and publishes nothing;
//   - a wrong secret gets 401;
//   - a payload the Check hook rejects gets its 4xx and reason, and nothing
//     is published.
func TestGatewayEveryOctokitExample(t *testing.T) {
	examples := webhookkit.GitHubExamples(t)
	const secretStr = "It's a Secret to Everybody"

	type post struct {
		key, event, contentType, body string
	}
	var posts []post
	for i, ex := range examples {
		p := post{key: fmt.Sprintf("guid-%04d", i), event: ex.Event, contentType: "application/json", body: string(ex.Body)}
		if i%5 == 0 {
			p.contentType = "application/x-www-form-urlencoded"
			p.body = "payload=" + url.QueryEscape(string(ex.Body))
		}
		posts = append(posts, p)
	}
	rejectKey := posts[len(posts)-1].key
	bodies := make([]string, len(posts))
	for i, p := range posts {
		bodies[i] = p.body
	}
	sigs := webhookkit.OctokitSign(t, secretStr, bodies)

	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "octokit")
	testkit.CreateTopic(t, brokers, topic, 3)
	rdb := redis.NewClient(&redis.Options{Addr: testkit.Redis(t)})
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := redisstore.New(rdb, redisstore.Options{Prefix: testkit.Name(t, "idem") + ":"})
	require.NoError(t, err)
	pub := newPublisher(t, brokers, topic, kafkapub.Options{SkipDurabilityCheck: true})
	h, err := idempotency.NewHandler(store, pub.Publish, idempotency.Options{
		Provider: idempotency.GitHub(),
		Secret:   []byte(secretStr),
		Check: func(_ context.Context, d idempotency.Delivery) error {
			if d.Key == rejectKey {
				return idempotency.Reject(http.StatusUnprocessableEntity, "cannot normalize this payload")
			}
			return nil
		},
	})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	send := func(p post, sig string) (int, string, bool) {
		req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(p.body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", p.contentType)
		req.Header.Set("User-Agent", "GitHub-Hookshot/044aadd")
		req.Header.Set(idempotency.HeaderGitHubDelivery, p.key)
		req.Header.Set(idempotency.HeaderGitHubEvent, p.event)
		req.Header.Set(idempotency.HeaderGitHubHookID, "292430182")
		req.Header.Set(idempotency.HeaderGitHubSignature, sig)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b), resp.Header.Get(idempotency.HeaderReplayed) == "true"
	}

	want := map[string]string{} // delivery id -> event type
	events := map[string]bool{}
	for i, p := range posts {
		status, body, _ := send(p, sigs[i])
		switch {
		case p.key == rejectKey:
			assert.Equal(t, http.StatusUnprocessableEntity, status)
			assert.Equal(t, "cannot normalize this payload\n", body)
		case p.event == "ping":
			assert.Equal(t, http.StatusOK, status, "ping %s", p.key)
		default:
			require.Equal(t, http.StatusAccepted, status, "%s %s (%s): %s", p.event, p.key, p.contentType, body)
			want[p.key] = p.event
			events[p.event] = true
		}
	}
	require.Greater(t, len(events), 50, "examples of many event types")
	t.Logf("%d examples of %d event types posted, %d published", len(posts), len(events), len(want))

	// A redelivery of each of a few deliveries is replayed.
	for i := 1; i < len(posts); i += len(posts) / 7 {
		if posts[i].event == "ping" || posts[i].key == rejectKey {
			continue
		}
		status, _, replayed := send(posts[i], sigs[i])
		assert.Equal(t, http.StatusAccepted, status)
		assert.True(t, replayed, posts[i].key)
	}
	// A wrong secret is refused.
	wrong := webhookkit.OctokitSign(t, "not the secret", []string{posts[1].body})
	status, _, _ := send(post{key: "guid-wrong", event: posts[1].event, contentType: posts[1].contentType, body: posts[1].body}, wrong[0])
	assert.Equal(t, http.StatusUnauthorized, status)

	// Exactly one record per accepted delivery, with its metadata.
	got := readAll(t, brokers, topic, 3, len(want))
	seen := map[string]int{}
	for _, m := range got {
		md, err := kafkapub.ReadMetadata(m)
		require.NoError(t, err)
		seen[md.EventID]++
		assert.Equal(t, want[md.EventID], md.EventType, md.EventID)
		assert.Equal(t, "github", md.Source)
		assert.Equal(t, "292430182", md.HookID)
		assert.True(t, strings.HasPrefix(string(m.Key), "github"), "partition key %q", m.Key)
		assert.Equal(t, byte('{'), m.Value[0], "the JSON is published, not the form body")
	}
	for id := range want {
		assert.Equal(t, 1, seen[id], id)
	}
	assert.Len(t, seen, len(want), "nothing but the accepted deliveries")
}

// readAll reads every record of topic's partitions, expecting want of them,
// and a little longer to catch extras.
func readAll(t *testing.T, brokers []string, topic string, partitions, want int) []kafka.Message {
	t.Helper()
	var out []kafka.Message
	for p := range partitions {
		out = append(out, testkit.ReadTopic(t, brokers, topic, p)...)
	}
	require.Equal(t, want, len(out), "records in the topic")
	return out
}
