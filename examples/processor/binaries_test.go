package main

import (
	"bufio"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/testkit"
)

func get(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func waitReady(t *testing.T, addr string, p *testkit.Process) {
	t.Helper()
	require.Eventually(t, func() bool {
		if !p.Running() {
			t.Fatalf("exited before it was ready: %v", p.Err())
		}
		code, _ := get("http://" + addr + "/readyz")
		return code == http.StatusOK
	}, time.Minute, 50*time.Millisecond)
}

// TestBinaries runs examples/gateway and examples/processor as separate
// processes against servers they did not start (Kafka with TLS, ClickHouse,
// Redis): the gateway refuses to start without webhook secrets; signed
// deliveries, each sent twice, reach ClickHouse exactly once through a
// kill -9 of the processor and one of the gateway; both serve the SDK's
// metrics on /metrics; on SIGTERM the gateway refuses new connections but
// finishes and publishes a delivery in flight, and the processor exits
// after a last checkpoint.
func TestBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs two binaries")
	}
	bin := t.TempDir()
	for _, b := range []struct{ name, pkg string }{{"gateway", "../gateway"}, {"processor", "."}} {
		out, err := exec.Command("go", "build", "-o", filepath.Join(bin, b.name), b.pkg).CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	gatewayBin, processorBin := filepath.Join(bin, "gateway"), filepath.Join(bin, "processor")

	// Servers the binaries did not start. Kafka speaks TLS only.
	serverTLS, _ := testkit.TLS(t)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: serverTLS.Certificates[0].Certificate[0]}), 0o644))
	// The killed processor's member expires after its session timeout,
	// under the consumer protocol (the processor's default, auto, on
	// kfake) a broker setting: 45 s by default.
	kopts := []kfake.Opt{kfake.NumBrokers(1), kfake.TLS(serverTLS), kfake.SeedTopics(3, "webhooks"),
		kfake.BrokerConfigs(map[string]string{"group.consumer.session.timeout.ms": "6000"})}
	var groupFlags []string
	switch testkit.GroupProtocol(t) {
	case "consumer":
		// A static member: its restart waits for the hold to end.
		groupFlags = []string{"-group-protocol", "consumer", "-group-instance-id", "processor-0"}
	case "classic":
		groupFlags = []string{"-group-protocol", "classic"}
	}
	kc, err := kfake.NewCluster(kopts...)
	require.NoError(t, err)
	t.Cleanup(kc.Close)
	brokers := strings.Join(kc.ListenAddrs(), ",")
	chAddr, db := testkit.ClickHouse(t)
	redisAddr := testkit.Redis(t)
	kafkaFlags := []string{"-brokers", brokers, "-topic", "webhooks", "-kafka-tls", "-kafka-ca", caFile}

	// No secrets: refused, loudly.
	refused := testkit.Command(t, gatewayBin, append([]string{"-listen", testkit.FreeAddr(t)}, kafkaFlags...))
	require.Error(t, refused.Wait(time.Minute))
	assert.Contains(t, refused.Logs(), "no webhook secret")

	const secret = "s3cret"
	gwAddr := testkit.FreeAddr(t)
	gwArgs := append([]string{"-listen", gwAddr, "-store", "redis", "-redis", redisAddr,
		"-github-secret", secret, "-jira-secret", secret}, kafkaFlags...)
	gw := testkit.Command(t, gatewayBin, gwArgs)
	procAddr := testkit.FreeAddr(t)
	procArgs := append([]string{"-listen", procAddr, "-group", "processor", "-clickhouse", chAddr, "-database", db,
		"-state-dir", t.TempDir(), "-checkpoint-interval", "200ms"}, append(kafkaFlags, groupFlags...)...)
	pr := testkit.Command(t, processorBin, procArgs)
	waitReady(t, gwAddr, gw)
	waitReady(t, procAddr, pr)

	send := func(i int) {
		body := fmt.Sprintf(`{"ref":"refs/heads/main","organization":{"login":"org-%d"}}`, i%4)
		for range 2 { // the provider retries
			req, err := http.NewRequest(http.MethodPost, "http://"+gwAddr+"/webhooks/github", strings.NewReader(body))
			require.NoError(t, err)
			mac := hmac.New(sha256.New, []byte(secret))
			mac.Write([]byte(body))
			req.Header.Set(idempotency.HeaderGitHubSignature, "sha256="+hex.EncodeToString(mac.Sum(nil)))
			req.Header.Set(idempotency.HeaderGitHubDelivery, fmt.Sprintf("delivery-%d", i))
			req.Header.Set(idempotency.HeaderGitHubEvent, "push")
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			answer, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.Less(t, resp.StatusCode, 300, "delivery %d: %s", i, answer)
		}
	}
	count := func(q string) uint64 { return testkit.Count(t, chAddr, db, q) }
	for i := range 20 {
		send(i)
	}
	require.Eventually(t, func() bool { return count("SELECT count() FROM events") == 20 }, time.Minute, 50*time.Millisecond)

	// kill -9 the processor, deliver more, start it again.
	pr.Kill()
	for i := 20; i < 40; i++ {
		send(i)
	}
	pr.Start()
	waitReady(t, procAddr, pr)
	require.Eventually(t, func() bool { return count("SELECT count() FROM events") >= 40 }, time.Minute, 50*time.Millisecond)
	// The SDK's metrics on /metrics.
	_, gwMetrics := get("http://" + gwAddr + "/metrics")
	assert.Contains(t, gwMetrics, "kafkapub_messages")
	assert.Contains(t, gwMetrics, "idempotency_claims")
	// The sink counts its rows once the insert is acknowledged, which with
	// asynchronous checkpoints can come just after the rows are visible.
	assert.Eventually(t, func() bool {
		_, prMetrics := get("http://" + procAddr + "/metrics")
		return strings.Contains(prMetrics, "checkpoint_duration") && strings.Contains(prMetrics, "exactlyonce_sink_rows_written")
	}, 30*time.Second, 100*time.Millisecond, "the processor's metrics on /metrics")

	// kill -9 the gateway; the restarted one answers redeliveries from Redis.
	gw.Restart() // SIGKILL, then start again
	waitReady(t, gwAddr, gw)
	for i := range 5 {
		send(i)
	}
	time.Sleep(500 * time.Millisecond) // a duplicate would land now
	assert.Equal(t, uint64(40), count("SELECT count() FROM events"))
	assert.Equal(t, uint64(40), count("SELECT uniqExact(event_id) FROM events"), "every delivery once")

	_, gwMetrics = get("http://" + gwAddr + "/metrics")
	assert.Contains(t, gwMetrics, `idempotency_claims_total{otel_scope_name="github.com/exactlyonce/exactlyonce/idempotency",otel_scope_schema_url="",otel_scope_version="",outcome="done"} 10`, // five deliveries, each twice
		"the restarted gateway answered the redeliveries from Redis")

	// SIGTERM with a delivery in flight (its body half sent): the gateway
	// stops accepting, finishes it, publishes it, then exits cleanly.
	body := `{"ref":"refs/heads/main","organization":{"login":"org-9"}}`
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(body))
	conn, err := net.Dial("tcp", gwAddr)
	require.NoError(t, err)
	defer conn.Close()
	fmt.Fprintf(conn, "POST /webhooks/github HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"+
		"%s: sha256=%s\r\n%s: in-flight\r\n%s: push\r\nContent-Length: %d\r\n\r\n%s",
		idempotency.HeaderGitHubSignature, hex.EncodeToString(mac.Sum(nil)), idempotency.HeaderGitHubDelivery,
		idempotency.HeaderGitHubEvent, len(body), body[:10])
	time.Sleep(200 * time.Millisecond) // the server is reading the body
	gw.Signal(syscall.SIGTERM)
	require.Eventually(t, func() bool { return strings.Contains(gw.Logs(), "shutting down") }, 10*time.Second, 10*time.Millisecond)
	// The log line comes just before the listener closes (the gateway first
	// takes the connections the kernel queued): wait for the close.
	assert.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", gwAddr, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	}, 10*time.Second, 20*time.Millisecond, "no new connection once shutting down")
	_, err = io.WriteString(conn, body[10:])
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusAccepted, resp.StatusCode, "the delivery in flight is finished")
	assert.NoError(t, gw.Wait(time.Minute))
	assert.Contains(t, gw.Logs(), "gateway stopped cleanly")
	require.Eventually(t, func() bool { return count("SELECT count() FROM events WHERE event_id = 'in-flight'") == 1 },
		time.Minute, 50*time.Millisecond, "and published")

	// SIGTERM of the processor: a last checkpoint, then a clean exit.
	assert.NoError(t, pr.Terminate(time.Minute))
	assert.Contains(t, pr.Logs(), "last checkpoint taken")
}
