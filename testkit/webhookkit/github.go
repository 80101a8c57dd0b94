package webhookkit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/embedded"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// GitHub's own test data and signer, from npm, fetched into the cache by
// `make deps` (or here, once, if npm is installed), never committed. The
// versions match the Makefile's.
const (
	OctokitExamplesPackage = "@octokit/webhooks-examples"
	OctokitExamplesVersion = "7.6.1"
	OctokitMethodsPackage  = "@octokit/webhooks-methods"
	OctokitMethodsVersion  = "6.0.0"
)

// GitHubExample is one example payload of one GitHub event type, as
// @octokit/webhooks-examples maintains them.
type GitHubExample struct {
	Event string
	Body  []byte
}

// GitHubExamples returns every example payload of api.github.com in
// @octokit/webhooks-examples, event by event. Without the package and npm
// to fetch it, the test fails when CI=true and is skipped otherwise.
func GitHubExamples(t testing.TB) []GitHubExample {
	t.Helper()
	ctx, cancel := setupContext(t)
	defer cancel()
	tgz, err := embedded.NpmPack(ctx, embedded.OctokitDir, OctokitExamplesPackage, OctokitExamplesVersion)
	if err != nil {
		testkit.Unavailable(t, OctokitExamplesPackage, err)
	}
	var index []struct {
		Name     string            `json:"name"`
		Examples []json.RawMessage `json:"examples"`
	}
	b, err := embedded.ReadTarFile(tgz, "package/api.github.com/index.json")
	if err == nil {
		err = json.Unmarshal(b, &index)
	}
	if err != nil {
		t.Fatalf("%s: %v", tgz, err)
	}
	var out []GitHubExample
	for _, e := range index {
		for _, raw := range e.Examples {
			var compact bytes.Buffer
			if err := json.Compact(&compact, raw); err != nil {
				t.Fatalf("%s: example of %s: %v", tgz, e.Name, err)
			}
			out = append(out, GitHubExample{Event: e.Name, Body: compact.Bytes()})
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no examples", tgz)
	}
	return out
}

// OctokitSign returns the X-Hub-Signature-256 value of each payload under
// secret, computed by GitHub's own signer (@octokit/webhooks-methods' sign,
// run with node). Without node or the package, the test fails when CI=true
// and is skipped otherwise.
func OctokitSign(t testing.TB, secret string, payloads []string) []string {
	t.Helper()
	ctx, cancel := setupContext(t)
	defer cancel()
	tgz, err := embedded.NpmPack(ctx, embedded.OctokitDir, OctokitMethodsPackage, OctokitMethodsVersion)
	if err != nil {
		testkit.Unavailable(t, OctokitMethodsPackage, err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		testkit.Unavailable(t, "node", fmt.Errorf("node runs %s (make deps installs it): %w", OctokitMethodsPackage, err))
	}
	index, err := embedded.ReadTarFile(tgz, "package/dist-node/index.js")
	if err != nil {
		t.Fatalf("%s: %v", tgz, err)
	}
	dir := t.TempDir()
	mod := filepath.Join(dir, "webhooks-methods.mjs")
	if err := os.WriteFile(mod, index, 0o644); err != nil {
		t.Fatal(err)
	}
	script := `import { sign } from ` + jsString("file://"+mod) + `;
const chunks = [];
for await (const c of process.stdin) chunks.push(c);
const { secret, payloads } = JSON.parse(Buffer.concat(chunks).toString("utf8"));
const out = [];
for (const p of payloads) out.push(await sign(secret, p));
process.stdout.write(JSON.stringify(out));`
	in, err := json.Marshal(struct {
		Secret   string   `json:"secret"`
		Payloads []string `json:"payloads"`
	}{secret, payloads})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, node, "--input-type=module", "-e", script)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	outb, err := cmd.Output()
	if err != nil {
		t.Fatalf("node sign: %v\n%s", err, stderr.String())
	}
	var sigs []string
	if err := json.Unmarshal(outb, &sigs); err != nil || len(sigs) != len(payloads) {
		t.Fatalf("node sign: %d signatures for %d payloads: %v", len(sigs), len(payloads), err)
	}
	return sigs
}

func jsString(s string) string {
	b, _ := json.Marshal(s) // a JSON string is a JS string literal
	return string(b)
}

// setupContext returns a context for set-up work bounded by three minutes
// (as testkit's) and by the test's own context.
func setupContext(t testing.TB) (context.Context, context.CancelFunc) {
	ctx := context.Background()
	if tt, ok := t.(interface{ Context() context.Context }); ok {
		ctx = tt.Context()
	}
	return context.WithTimeout(ctx, 3*time.Minute)
}
