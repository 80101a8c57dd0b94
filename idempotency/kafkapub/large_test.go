package kafkapub_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint/s3storage"
	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/idempotency/kafkapub"
	"github.com/exactlyonce/exactlyonce/testkit"
	"github.com/exactlyonce/exactlyonce/testkit/s3kit"
	"github.com/exactlyonce/exactlyonce/testkit/webhookkit"
)

// largePush is a GitHub-shaped delivery of about size bytes: GitHub's own
// example payloads as its commits, the repetition a large push has.
func largePush(t *testing.T, size int) []byte {
	t.Helper()
	examples := webhookkit.GitHubExamples(t)
	var b bytes.Buffer
	b.WriteString(`{"ref":"refs/heads/main","commits":[`)
	for i := 0; b.Len() < size; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(examples[i%len(examples)].Body)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// randomBody is a delivery of about size bytes that no codec shrinks
// below a quarter: a base64 blob of random bytes.
func randomBody(t *testing.T, size int) []byte {
	t.Helper()
	raw := make([]byte, size*3/4)
	_, err := rand.Read(raw)
	require.NoError(t, err)
	return []byte(`{"blob":"` + base64.StdEncoding.EncodeToString(raw) + `"}`)
}

// handlerFor serves pub.Publish (or an idempotent publisher's) with a fresh
// memory store, as a gateway that forgot every key.
func handlerFor(t *testing.T, publish idempotency.Func) string {
	t.Helper()
	store, err := idempotency.NewMemoryStore(idempotency.MemoryOptions{})
	require.NoError(t, err)
	p := idempotency.GitHub()
	p.Partition = nil
	// Generous deadlines: this test is about sizes, and reading, signing
	// and validating 20 MiB under -race on a loaded machine takes seconds.
	h, err := idempotency.NewHandler(store, publish, idempotency.Options{Provider: p, Secret: secret, MaxBodyBytes: 25 << 20,
		ReadTimeout: 30 * time.Second, AnswerTimeout: time.Minute, SideEffectTimeout: 40 * time.Second, PendingTTL: 2 * time.Minute})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func postDelivery(t *testing.T, url, key string, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(idempotency.HeaderGitHubDelivery, key)
	req.Header.Set(idempotency.HeaderGitHubEvent, "push")
	req.Header.Set(idempotency.HeaderGitHubSignature, idempotency.SignGitHub(secret, body))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// A 2 MiB and a 20 MiB GitHub delivery, to a topic of Kafka's default
// max.message.bytes (1 MB; kfake enforces it as a broker does, and the
// test exercises only that topic-level limit, not message.max.bytes set
// apart on the broker): a large push ends in Kafka once, compressed with
// zstd; an incompressible one goes through the claim check to S3, read
// back by Payload, one object however often it is published; without a
// claim check it is answered 413 with the reason, every time, never 503.
// On main every body over 1 MiB was answered 503 on every delivery and
// redelivery.
func TestLargeDeliveries(t *testing.T) {
	k := testkit.StartKfake(t)
	s3c := s3kit.Bucket(t)
	payloads, err := s3storage.New(s3c.Client(), s3c.Bucket, s3storage.Options{Prefix: s3c.Prefix})
	require.NoError(t, err)

	type publisher interface {
		Publish(context.Context, idempotency.Delivery) error
	}
	newPub := func(t *testing.T, topic string, idempotent bool, opts kafkapub.Options) publisher {
		opts.SkipDurabilityCheck = true
		if idempotent {
			p, err := kafkapub.NewIdempotent(context.Background(), k.Brokers(), topic, opts)
			require.NoError(t, err)
			t.Cleanup(func() { _ = p.Close() })
			return p
		}
		return newPublisher(t, k.Brokers(), topic, opts)
	}
	tests := []struct {
		name       string
		body       func(t *testing.T) []byte
		idempotent bool
		claimCheck bool
		want       int    // status
		wantVia    string // "record", "claim check" or "" (nothing written)
	}{
		{"2 MiB push", func(t *testing.T) []byte { return largePush(t, 2<<20) }, false, false, 202, "record"},
		{"20 MiB push", func(t *testing.T) []byte { return largePush(t, 20<<20) }, false, false, 202, "record"},
		{"2 MiB random, no claim check", func(t *testing.T) []byte { return randomBody(t, 2<<20) }, false, false, 413, ""},
		{"20 MiB random, no claim check", func(t *testing.T) []byte { return randomBody(t, 20<<20) }, false, false, 413, ""},
		{"20 MiB random, claim check", func(t *testing.T) []byte { return randomBody(t, 20<<20) }, false, true, 202, "claim check"},
		{"2 MiB push, idempotent producer, no claim check", func(t *testing.T) []byte { return largePush(t, 2<<20) }, true, false, 413, ""},
		{"20 MiB push, idempotent producer, claim check", func(t *testing.T) []byte { return largePush(t, 20<<20) }, true, true, 202, "claim check"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			topic := testkit.Name(t, "webhooks")
			testkit.CreateTopic(t, k.Brokers(), topic, 1)
			opts := kafkapub.Options{}
			if tt.claimCheck {
				opts.Payloads = payloads
			}
			pub := newPub(t, topic, tt.idempotent, opts)
			body := tt.body(t)
			key := testkit.Name(t, "guid")

			// Delivered twice to two gateways that share nothing (a
			// redelivery after the key was forgotten): the worst case
			// of a retry.
			for range 2 {
				status, reason := postDelivery(t, handlerFor(t, pub.Publish), key, body)
				require.Equal(t, tt.want, status, reason)
				if status == http.StatusRequestEntityTooLarge {
					assert.Contains(t, reason, "max.message.bytes 1048588")
					assert.Contains(t, reason, fmt.Sprintf("payload of %d bytes", len(body)))
				}
			}
			if tt.wantVia == "" {
				assert.Zero(t, messageCount(t, k.Brokers(), topic, 1), "nothing written")
				return
			}
			msgs := readAll(t, k.Brokers(), topic, 1, 2)
			for _, m := range msgs {
				got, err := kafkapub.Payload(context.Background(), payloads, m)
				require.NoError(t, err)
				assert.True(t, bytes.Equal(body, got), "the payload reads back whole")
				_, viaClaim := header(m, kafkapub.HeaderClaimCheck)
				assert.Equal(t, tt.wantVia == "claim check", viaClaim)
			}
			if tt.wantVia == "claim check" {
				names, err := payloads.List(context.Background(), "github/")
				require.NoError(t, err)
				assert.Equal(t, []string{"github/" + key}, filter(names, key), "one object per delivery, whatever the retries")
			}
		})
	}
}

func header(m kafka.Message, key string) (string, bool) {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

func filter(names []string, key string) []string {
	var out []string
	for _, n := range names {
		if bytes.HasSuffix([]byte(n), []byte(key)) {
			out = append(out, n)
		}
	}
	return out
}
