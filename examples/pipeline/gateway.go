package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/idempotency/kafkapub"
)

// webhookSecret signs the simulated deliveries; the gateway verifies them.
var webhookSecret = []byte("demo-webhook-secret")

// gateway is stage 1: the HTTP endpoint providers deliver webhooks to. It
// answers 2xx only once Kafka acknowledged the event, and claims a delivery
// id as done only then.
type gateway struct {
	srv   *http.Server
	ln    net.Listener
	pub   *kafkapub.Publisher
	flaky *flakyKafka
	done  chan error

	closeOnce sync.Once
	closeErr  error
}

func startGateway(ctx context.Context, brokers []string, topic string, store idempotency.Store, rng *rand.Rand, faults bool) (*gateway, error) {
	pub, err := kafkapub.New(ctx, brokers, topic, kafkapub.Options{
		// One organisation's events go to one partition, so the processor's
		// per-employee windows (keyed by organisation and employee) each live
		// whole in one partition. The organisation is the normalizer's:
		// GitHub organization or repository owner, Jira site. (The Jira
		// preset's default, site and project, would split a site's
		// employees over partitions.)
		PartitionKey: func(d idempotency.Delivery) ([]byte, error) {
			ev, err := normalize(d.Source, d.Event, d.Key, d.Body)
			if err != nil {
				return nil, err // Check let only normalizable events through
			}
			return []byte(ev.OrgID), nil
		},
	})
	if err != nil {
		return nil, err
	}
	flaky := &flakyKafka{pub: pub, rng: rng}
	if faults {
		flaky.failBefore, flaky.failAfter = 0.03, 0.03
	}
	mux := http.NewServeMux()
	for path, provider := range map[string]idempotency.Provider{
		"/webhooks/github": idempotency.GitHub(),
		"/webhooks/jira":   idempotency.JiraCloud(),
	} {
		h, err := idempotency.NewHandler(store, flaky.Publish, idempotency.Options{
			Provider:   provider,
			Secret:     webhookSecret,
			Check:      checkDelivery,
			RetryAfter: time.Second,
		})
		if err != nil {
			return nil, err
		}
		mux.Handle("POST "+path, h)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	g := &gateway{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, ln: ln, pub: pub, flaky: flaky, done: make(chan error, 1)}
	go func() { g.done <- g.srv.Serve(ln) }()
	return g, nil
}

// checkDelivery normalizes a verified delivery before the gateway claims
// or publishes anything: an activity the metrics do not count is answered
// 200 and not published; a payload that cannot be normalized is answered
// 422 with the reason (the provider shows it in its delivery log) and not
// published. The processor normalizes the published payload again.
func checkDelivery(_ context.Context, d idempotency.Delivery) error {
	_, err := normalize(d.Source, d.Event, d.Key, d.Body)
	var nerr *NormalizeError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errNotCounted):
		return fmt.Errorf("%w: %v", idempotency.ErrIgnored, err)
	case errors.As(err, &nerr):
		return idempotency.Reject(http.StatusUnprocessableEntity, nerr.Error())
	default:
		return err
	}
}

func (g *gateway) URL() string { return "http://" + g.ln.Addr().String() }

// Close stops the gateway after its in-flight requests. It is safe to call
// more than once.
func (g *gateway) Close(ctx context.Context) error {
	g.closeOnce.Do(func() {
		err := g.srv.Shutdown(ctx)
		if serr := <-g.done; !errors.Is(serr, http.ErrServerClosed) {
			err = errors.Join(err, serr)
		}
		g.closeErr = errors.Join(err, g.pub.Close())
	})
	return g.closeErr
}

// flakyKafka injects the two failures of a Kafka publish that matter:
// the write never happened (broker unreachable), or it happened and the
// acknowledgement was lost. Either way the gateway must answer 503 so the
// provider retries; the second case leaves a duplicate in Kafka that the
// stream processor's dedup drops.
type flakyKafka struct {
	pub                   *kafkapub.Publisher
	mu                    sync.Mutex
	rng                   *rand.Rand
	failBefore, failAfter float64
	failedBefore, ackLost atomic.Int64
	published             atomic.Int64
}

var (
	errInjectedUnreachable = errors.New("injected fault: Kafka unreachable")
	errInjectedAckLost     = errors.New("injected fault: Kafka wrote the event but the ack was lost")
)

func (f *flakyKafka) Publish(ctx context.Context, d idempotency.Delivery) error {
	f.mu.Lock()
	r := f.rng.Float64()
	f.mu.Unlock()
	if r < f.failBefore {
		f.failedBefore.Add(1)
		return errInjectedUnreachable
	}
	if err := f.pub.Publish(ctx, d); err != nil {
		return err
	}
	f.published.Add(1)
	if r < f.failBefore+f.failAfter {
		f.ackLost.Add(1)
		return errInjectedAckLost
	}
	return nil
}
