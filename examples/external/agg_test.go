package webhookagg_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/testkit"
	"github.com/exactlyonce/exactlyonce/testkit/webhookkit"

	"example.com/webhookagg"
)

// TestPipeline sends GitHub push deliveries, each twice (the second a
// retry), through a gateway (Redis idempotency store, Kafka publisher) to
// the aggregator, which runs in a process of its own and is killed with
// SIGKILL twice while it writes rows, and started again each time. Then
// one delivery per organisation closes the last minutes, and one comes
// late. It checks, read with FINAL, that ClickHouse has every event once,
// the exact count per organisation and minute, and that the late event
// was logged rather than dropped in silence.
func TestPipeline(t *testing.T) {
	svc := testkit.Setup(t, "service", func() webhookagg.Service {
		chAddr, db := testkit.ClickHouse(t)
		s := webhookagg.Service{Brokers: testkit.Kafka(t), Group: testkit.Name(t, "agg"), Topic: testkit.Name(t, "webhooks"),
			DB: chsink.DB{Addr: chAddr, Database: db}, Dir: t.TempDir()}
		testkit.CreateTopic(t, s.Brokers, s.Topic, 2)
		for _, q := range webhookagg.DDL {
			require.NoError(t, testkit.Exec(t.Context(), chAddr, "", fmt.Sprintf(q, db)))
		}
		return s
	})
	agg := testkit.Func(t, "aggregator", func(ctx context.Context) error { return webhookagg.Run(ctx, svc) })

	// The gateway, GitHub deliveries signed with the webhook's secret.
	secret := []byte("webhook secret")
	url := webhookkit.Gateway(t, svc.Brokers, svc.Topic, webhookkit.GatewayOptions{Secret: secret})
	base := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	delivery := func(id string, org int, at time.Time) webhookkit.Delivery {
		body := fmt.Sprintf(`{"ref":"refs/heads/main","organization":{"login":"org-%d"},"head_commit":{"timestamp":%q}}`,
			org, at.Format(time.RFC3339Nano))
		return webhookkit.Delivery{Provider: idempotency.GitHub(), ID: id, Event: "push", Body: []byte(body), Secret: secret}
	}
	// send delivers d and, as GitHub would after a lost answer, again:
	// the retry is answered with the first answer, replayed (or 503 while
	// the first is being recorded: then once more), published nowhere.
	send := func(ctx context.Context, d webhookkit.Delivery) error {
		a, err := webhookkit.Send(ctx, url, d)
		if err != nil || a.Status >= 300 {
			return fmt.Errorf("delivery %s: %d %s %v", d.ID, a.Status, a.Body, err)
		}
		d.Retry = 1
		for range 100 {
			if a, err = webhookkit.Send(ctx, url, d); err != nil || a.Status != http.StatusServiceUnavailable {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil || a.Status >= 300 || !a.Replayed() {
			return fmt.Errorf("retry of %s: %d %s %v, want the first answer replayed", d.ID, a.Status, a.Body, err)
		}
		return nil
	}

	// The sender: one event every 10 s of event time, organisations in
	// turn, a delivery every 20 ms, until both kills are done (at least
	// 120), so that input keeps arriving while the aggregator is killed.
	var killed atomic.Bool
	var sent int
	sendErr := make(chan error, 1)
	ctx, cancel := context.WithCancelCause(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		err := func() error {
			for sent = 0; sent < 120 || !killed.Load(); sent++ {
				if err := send(ctx, delivery(fmt.Sprintf("delivery-%d", sent), sent%3, base.Add(time.Duration(sent)*10*time.Second))); err != nil {
					return err
				}
				time.Sleep(20 * time.Millisecond)
			}
			return nil
		}()
		if err != nil {
			cancel(fmt.Errorf("the sender failed: %w", err)) // ends the wait for growth below
		}
		sendErr <- err
	})
	t.Cleanup(func() { cancel(nil); wg.Wait() })

	events := func() (uint64, error) {
		return testkit.QueryCount(t.Context(), svc.DB.Addr, svc.DB.Database, "SELECT count() FROM events")
	}
	for kill := range 2 {
		kctx, kcancel := context.WithTimeout(ctx, 2*time.Minute)
		at := agg.KillWhileGrowing(kctx, events)
		kcancel()
		t.Logf("kill %d: SIGKILL with %d events written", kill, at)
		agg.Start()
	}
	killed.Store(true)
	require.NoError(t, <-sendErr)

	// One event per organisation two minutes after the last closes every
	// minute before; then one that is late for its minute.
	closer := base.Add(time.Duration(sent)*10*time.Second + 2*time.Minute).Truncate(time.Minute)
	for org := range 3 {
		require.NoError(t, send(t.Context(), delivery(fmt.Sprintf("closer-%d", org), org, closer)))
	}
	require.NoError(t, send(t.Context(), delivery("late-0", 0, base)))

	var want [][]string // events per organisation and minute, before closer
	perMinute := map[[2]int]int{}
	for i := range sent {
		perMinute[[2]int{i * 10 / 60, i % 3}]++
	}
	for m := 0; base.Add(time.Duration(m) * time.Minute).Before(closer); m++ {
		for org := range 3 {
			if n := perMinute[[2]int{m, org}]; n > 0 {
				want = append(want, []string{fmt.Sprintf("org-%d", org), base.Add(time.Duration(m) * time.Minute).Format("2006-01-02 15:04:05.000"), fmt.Sprint(n)})
			}
		}
	}
	testkit.EventuallyRows(t, svc.DB.Addr, svc.DB.Database, fmt.Sprintf(
		"SELECT org, start, events FROM org_minute FINAL WHERE start < '%s' ORDER BY start, org", closer.Format(time.DateTime)), want)
	total := fmt.Sprint(sent + 4) // the closers and the late one too
	testkit.EventuallyRows(t, svc.DB.Addr, svc.DB.Database, "SELECT count(), uniqExact(id) FROM events", [][]string{{total, total}})
	require.Eventually(t, func() bool { return strings.Contains(agg.Logs(), "id=late-0") }, time.Minute, 50*time.Millisecond,
		"the late event is logged")
	require.NoError(t, agg.Terminate(time.Minute), "a graceful stop")
}
