package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/internal/golden"
	"github.com/exactlyonce/exactlyonce/testkit"
)

const testSecret = "gateway-test-secret"

// env returns a getenv over m.
func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// testGateway is run() in this process, on a free loopback port.
type testGateway struct {
	url  string
	stop context.CancelFunc
	done chan error
	logs *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startGateway runs the gateway with args (plus -listen) and waits until
// /readyz answers 200. It is stopped at cleanup.
func startGateway(t *testing.T, args ...string) *testGateway {
	t.Helper()
	addr := testkit.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	g := &testGateway{url: "http://" + addr, stop: cancel, done: make(chan error, 1), logs: &syncBuffer{}}
	go func() { g.done <- run(ctx, append(args, "-listen", addr), env(nil), g.logs) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-g.done:
		case <-time.After(30 * time.Second):
			t.Errorf("gateway did not stop")
		}
		if t.Failed() {
			t.Logf("gateway log:\n%s", g.logs.String())
		}
	})
	require.Eventually(t, func() bool {
		select {
		case err := <-g.done:
			g.done <- err
			require.NoError(t, err, "gateway exited")
		default:
		}
		status, _ := g.get("/readyz")
		return status == http.StatusOK
	}, 30*time.Second, 20*time.Millisecond)
	return g
}

func (g *testGateway) get(path string) (int, string) {
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(g.url + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// deliver posts a signed GitHub delivery and returns the status.
func (g *testGateway) deliver(t *testing.T, c *http.Client, key string, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, g.url+"/webhooks/github", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(idempotency.HeaderGitHubDelivery, key)
	req.Header.Set(idempotency.HeaderGitHubEvent, "push")
	req.Header.Set(idempotency.HeaderGitHubSignature, idempotency.SignGitHub([]byte(testSecret), body))
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func pushBody(org string) []byte {
	return fmt.Appendf(nil, `{"ref":"refs/heads/main","repository":{"full_name":"%s/r","owner":{"login":"%s"}},"organization":{"login":"%s"},"commits":[]}`, org, org, org)
}

// -h prints every flag beside its environment variable and returns
// flag.ErrHelp, which main turns into exit status 0 (on main it logged
// "gateway stopped: flag: help requested" and exited 1; TestSIGTERMDrains
// runs the binary).
func TestHelpListsEveryFlagAndItsVariable(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"-h"}, env(nil), &out)
	require.ErrorIs(t, err, flag.ErrHelp)
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	var c config
	s, _, _, _ := flags(fs, env(nil), &c)
	fs.VisitAll(func(f *flag.Flag) {
		v, ok := s.env[f.Name]
		if assert.True(t, ok, "-%s has no environment variable", f.Name) {
			assert.Contains(t, out.String(), "-"+f.Name)
			assert.Contains(t, out.String(), "("+v, "-%s's variable in -h", f.Name)
		}
	})
	// And from -h's text alone, whatever registered the flag: each flag's
	// usage ends with its variable in brackets. (-audit-stage had none.)
	blocks := regexp.MustCompile(`(?m)^  -`).Split(out.String(), -1)[1:]
	require.NotEmpty(t, blocks)
	for _, b := range blocks {
		b, _, _ = strings.Cut(b, "\n  S3_") // the environment-only trailer
		name, _, _ := strings.Cut(b, "\n")
		assert.Regexp(t, `\([A-Z0-9_]+(=(true|false))?\)\s*(\(default .*\))?\s*$`, strings.TrimSpace(b), "-%s names no environment variable in -h", name)
	}
}

// Every setting is read from its environment variable when the flag is not
// given, and the flag wins over it. On main -retry-after, -pending-ttl and
// -shutdown-timeout had none.
func TestEnvironmentVariables(t *testing.T) {
	vars := map[string]string{
		"GITHUB_WEBHOOK_SECRET":    "s",
		"GATEWAY_PROVIDERS":        "github",
		"GATEWAY_RETRY_AFTER":      "7s",
		"GATEWAY_PENDING_TTL":      "45s",
		"GATEWAY_SHUTDOWN_TIMEOUT": "3s",
		"GATEWAY_MAX_BODY_BYTES":   "1234",
		"GATEWAY_READ_TIMEOUT":     "2s",
		"GATEWAY_ANSWER_TIMEOUT":   "6s",
		"GATEWAY_MAX_IN_FLIGHT":    "9",
		"KAFKA_COMPRESSION":        "zstd",
		"KAFKA_IDEMPOTENT":         "true",
	}
	c, err := parse(nil, env(vars), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 7*time.Second, c.retryAfter)
	assert.Equal(t, 45*time.Second, c.pendingTTL)
	assert.Equal(t, 3*time.Second, c.shutdownTimeout)
	assert.Equal(t, int64(1234), c.maxBodyBytes)
	assert.Equal(t, 2*time.Second, c.readTimeout)
	assert.Equal(t, 6*time.Second, c.answerTimeout)
	assert.Equal(t, 9, c.maxInFlight)
	assert.Equal(t, "zstd", c.compression)
	assert.True(t, c.idempotent)
	assert.Equal(t, []string{"github"}, c.providers)

	c, err = parse([]string{"-retry-after", "1s"}, env(vars), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, time.Second, c.retryAfter, "the flag wins")

	vars["GATEWAY_PENDING_TTL"] = "soon"
	_, err = parse(nil, env(vars), io.Discard)
	assert.ErrorContains(t, err, "GATEWAY_PENDING_TTL")
}

// -providers github serves only GitHub and needs only GitHub's secret; on
// main a GitHub-only user could not start without a Jira secret unless
// -accept-unsigned opened the Jira endpoint unsigned.
func TestProvidersGitHubOnly(t *testing.T) {
	_, err := parse(nil, env(map[string]string{"GITHUB_WEBHOOK_SECRET": "s"}), io.Discard)
	assert.ErrorContains(t, err, "no webhook secret for jira", "both providers by default")
	_, err = parse([]string{"-providers", "github,gitlab"}, env(nil), io.Discard)
	assert.ErrorContains(t, err, `unknown provider "gitlab"`)

	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "webhooks")
	testkit.CreateTopic(t, brokers, topic, 1)
	g := startGateway(t, "-providers", "github", "-github-secret", testSecret,
		"-brokers", strings.Join(brokers, ","), "-topic", topic)
	status, body := g.deliver(t, http.DefaultClient, "d1", pushBody("octo"))
	assert.Equal(t, http.StatusAccepted, status, body)
	resp, err := http.Post(g.url+"/webhooks/jira", "application/json", strings.NewReader(`{}`))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "the Jira endpoint is not served")
	assert.NotContains(t, g.logs.String(), "ACCEPTING UNSIGNED")
}

// The table of the gateway's settings in docs/operations.md lists every
// flag with its variable and default. Regenerate it with
//
//	go test ./examples/gateway -run TestREADMESettings -update
func TestREADMESettings(t *testing.T) {
	const begin, end = "<!-- gateway settings: generated by TestREADMESettings -->\n", "<!-- end of gateway settings -->\n"
	readme, err := os.ReadFile("../../docs/operations.md")
	require.NoError(t, err)
	i, j := bytes.Index(readme, []byte(begin)), bytes.Index(readme, []byte(end))
	require.True(t, i >= 0 && j > i, "docs/operations.md has no gateway settings table between %q and %q", begin, end)
	want := settingsTable()
	got := string(readme[i+len(begin) : j])
	if golden.Updating() && got != want {
		out := append(append(append([]byte(nil), readme[:i+len(begin)]...), want...), readme[j:]...)
		require.NoError(t, os.WriteFile("../../docs/operations.md", out, 0o644))
		return
	}
	assert.Equal(t, want, got, "docs/operations.md's gateway settings differ from the flags; run with -update")
}

// settingsTable is the table of the flags in docs/operations.md.
func settingsTable() string {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	var c config
	s, _, _, _ := flags(fs, env(nil), &c)
	var b strings.Builder
	b.WriteString("| flag | environment | default | |\n|---|---|---|---|\n")
	fs.VisitAll(func(f *flag.Flag) {
		usage := strings.TrimSuffix(f.Usage, " ("+s.env[f.Name]+")")
		usage = strings.TrimSuffix(usage, " ("+s.env[f.Name]+"=true)")
		usage = strings.TrimSuffix(usage, " ("+s.env[f.Name]+"=false)")
		def := "`" + f.DefValue + "`"
		if f.DefValue == "" {
			def = ""
		}
		v := s.env[f.Name]
		if _, ok := f.Value.(interface{ IsBoolFlag() bool }); ok {
			v += "=" + map[string]string{"true": "false", "false": "true"}[f.DefValue]
		}
		fmt.Fprintf(&b, "| `-%s` | `%s` | %s | %s |\n", f.Name, v, def, strings.ReplaceAll(usage, "|", "\\|"))
	})
	b.WriteString("| | `S3_ACCESS_KEY_ID`, `S3_SECRET_ACCESS_KEY` | | credentials of `-claim-check-bucket` (environment only) |\n")
	return b.String()
}

// The gateway you build and deploy has none of the demo harness's flags
// (they were 4 of its flags on main: #32); the harness's build, -tags demo,
// adds them (demo.go).
func TestDeployedGatewayHasNoDemoFlags(t *testing.T) {
	var out bytes.Buffer
	require.ErrorIs(t, run(context.Background(), []string{"-h"}, env(nil), &out), flag.ErrHelp)
	for _, f := range []string{"-inject-publish-failures", "-inject-lost-acks", "-inject-seed", "-naive"} {
		assert.NotContains(t, out.String(), f)
	}
	assert.ErrorContains(t, run(context.Background(), []string{"-naive", "gateway"}, env(nil), io.Discard),
		"flag provided but not defined: -naive")
}

// The tenant-minute pipeline's policy for event types: every one is
// published, one no provider documents included, but GitHub's ping; with
// -events only those named are, and the others are answered 200 and not
// published.
func TestEventsPolicy(t *testing.T) {
	brokers := testkit.Kafka(t)
	send := func(g *testGateway, key, event string) (int, string) {
		body := pushBody("octo")
		req, err := http.NewRequest(http.MethodPost, g.url+"/webhooks/github", bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(idempotency.HeaderGitHubDelivery, key)
		req.Header.Set(idempotency.HeaderGitHubEvent, event)
		req.Header.Set(idempotency.HeaderGitHubSignature, idempotency.SignGitHub([]byte(testSecret), body))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	tests := []struct {
		name   string
		events string
		want   map[string]int // event type -> status
	}{
		{"every type by default", "", map[string]int{"push": 202, "made_up_event": 202, "ping": 200}},
		{"only -events", "push,issues", map[string]int{"push": 202, "issues": 202, "made_up_event": 200, "pull_request": 200}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			topic := testkit.Name(t, "webhooks")
			testkit.CreateTopic(t, brokers, topic, 1)
			g := startGateway(t, "-providers", "github", "-github-secret", testSecret,
				"-brokers", strings.Join(brokers, ","), "-topic", topic, "-events", tt.events)
			published := 0
			for event, want := range tt.want {
				status, body := send(g, "d-"+event, event)
				assert.Equal(t, want, status, "%s: %s", event, body)
				if want == http.StatusAccepted {
					published++
				}
			}
			assert.Equal(t, published, recordCount(t, brokers, topic), "only the 202s are in Kafka")
		})
	}
}

// recordCount returns how many records topic's one partition holds.
func recordCount(t *testing.T, brokers []string, topic string) int {
	t.Helper()
	n := 0
	for _, c := range eventIDs(t, brokers, topic, 1) {
		n += c
	}
	return n
}
