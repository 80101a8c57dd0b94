// Command gateway receives GitHub and Jira webhooks and publishes each
// delivery to Kafka exactly once per delivery id (package idempotency with a
// memory or Redis store, and idempotency/kafkapub), answering 2xx only once
// Kafka has acknowledged the event.
//
//	gateway -brokers kafka:9092 -topic webhooks -store redis -redis redis:6379 \
//		-github-secret "$GITHUB_WEBHOOK_SECRET" -jira-secret "$JIRA_WEBHOOK_SECRET"
//
// Endpoints: POST /webhooks/github, POST /webhooks/jira (those of
// -providers), GET /healthz (the process runs), GET /readyz (it can
// publish: Kafka and Redis answer a probe each second), GET /metrics (the
// SDK's OpenTelemetry metrics in the Prometheus format). Every setting has
// an environment variable (-h lists both, and the table in docs/operations.md). It
// refuses to start without a webhook secret for each provider it serves
// unless -accept-unsigned is given, and then warns at start.
//
// Under real traffic: a body is read within -read-timeout (408 and the
// connection closed after it), every delivery is answered within
// -answer-timeout whatever Kafka and the store do, on new and keep-alive
// connections alike (a 503 whose publish runs on closes its connection,
// and a publish waiting behind another of its partition ends at the
// deadline), beyond -max-in-flight
// deliveries a new one is answered 503 at once, and a body that fits no
// Kafka record even compressed goes to -claim-check-bucket or is answered
// 413 with the reason (githubredeliver does not redeliver it).
//
// -pipeline says what it publishes. tenant-minute (the default) publishes
// every signed delivery, keyed by the provider's tenant: a gateway you can
// point any GitHub or Jira hook at, whose records the processor's default
// chain counts per tenant and minute. It publishes every event type, one
// it has never heard of included (providers add event types, and dropping
// them would lose events silently), but GitHub's ping; -events names the
// ones to publish, answering others 200 unpublished (counted in
// idempotency.ignored). devmetrics publishes only what the
// per-employee metrics of package examples/devmetrics count, keyed by
// organisation; it answers other activities 200 and payloads it cannot
// normalize 422 with the reason, unpublished.
//
// It publishes through kafkapub.NewIdempotent, the idempotent producer
// (-idempotent-producer, on by default): the broker drops a batch the
// producer sends again after a lost acknowledgement, and a delivery whose
// publish is still unanswered at its answer deadline (a broker that
// stopped answering) is answered 503 while its key stays held until the
// producer knows whether the record was written; the redelivery then gets
// the stored 202, or writes it once. -idempotent-producer=false publishes
// through kafkapub.New, kafka-go's writer, for brokers without
// idempotence: a lost ack, or a delivery answered 503 while the broker
// did not answer, may then be written twice (its key is held for
// -pending-ttl, not until the outcome is known), and the processor's dedup
// drops the copy by its event id.
//
// On SIGTERM or SIGINT it stops being ready, takes the connections
// already queued for it and then stops accepting, answers every request
// whose headers come within half a second (the others are cut, and a
// client still sending its body at -read-timeout is answered 408, so they
// retry), finishes the deliveries in flight (bounded by
// -shutdown-timeout), exits 0 and closes the Kafka writer.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/exactlyonce/exactlyonce/checkpoint/s3storage"
	"github.com/exactlyonce/exactlyonce/examples/devmetrics"
	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/idempotency/kafkapub"
	"github.com/exactlyonce/exactlyonce/idempotency/redisstore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return // -h: the usage is printed, nothing went wrong
	}
	if err != nil {
		slog.New(slog.NewJSONHandler(os.Stderr, nil)).Error("gateway stopped", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	cfg, err := parse(args, getenv, stderr)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: cfg.logLevel}))
	// Metrics: the SDK's instruments, exported for Prometheus.
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(context.Background())

	var store idempotency.Store
	var probes []probe
	switch cfg.store {
	case "redis":
		// One dial per attempt: with Redis down, a delivery is answered
		// 503 in about 0.1 s instead of after go-redis's 5 dials per
		// attempt (1.8 to 3.8 s). Lost replies are still replayed.
		rdb := redis.NewClient(&redis.Options{Addr: cfg.redisAddr, DialerRetries: 1, DialTimeout: time.Second})
		defer rdb.Close()
		// Concurrent deliveries share pipelines, as redisstore advises; the
		// deferred face lets each store call end with StoreTimeout.
		ap, err := rdb.AsyncAutoPipeline()
		if err != nil {
			return err
		}
		if store, err = redisstore.New(ap, redisstore.Options{Prefix: cfg.redisPrefix}); err != nil {
			return err
		}
		probes = append(probes, probe{"redis", func(ctx context.Context) error { return rdb.Ping(ctx).Err() }})
	default:
		ms, err := idempotency.NewMemoryStore(idempotency.MemoryOptions{})
		if err != nil {
			return err
		}
		store = ms
		log.Warn("idempotency keys are kept in memory: a restarted gateway publishes redelivered events again (the processor's dedup drops them); use -store redis to answer them from the store")
	}
	transport, err := cfg.kafka.transport()
	if err != nil {
		return err
	}
	pubOpts := kafkapub.Options{Transport: transport, Compression: cfg.compression, Logger: log, MeterProvider: mp}
	if cfg.claimCheck.bucket != "" {
		client := s3storage.NewClient(s3storage.ClientConfig{
			Endpoint:        cfg.claimCheck.endpoint,
			Region:          cfg.claimCheck.region,
			AccessKeyID:     cfg.claimCheck.accessKeyID,
			SecretAccessKey: cfg.claimCheck.secretAccessKey,
		})
		st, err := s3storage.New(client, cfg.claimCheck.bucket, s3storage.Options{Prefix: cfg.claimCheck.prefix})
		if err != nil {
			return fmt.Errorf("-claim-check-bucket: %w", err)
		}
		pubOpts.Payloads = st
	}
	var check func(context.Context, idempotency.Delivery) error
	if cfg.pipeline == "devmetrics" {
		// Normalize before claiming: what the metrics do not count is
		// answered 200, what cannot be normalized 422, neither published;
		// one organisation's events go to one partition.
		check, pubOpts.PartitionKey = devmetrics.Check, devmetrics.PartitionKey
	}
	check = onlyEvents(list(cfg.events), check)
	var publish idempotency.Func
	if cfg.idempotent {
		pub, err := kafkapub.NewIdempotent(ctx, cfg.brokers, cfg.topic, pubOpts)
		if err != nil {
			return err
		}
		defer pub.Close()
		publish = pub.Publish
		probes = append(probes, probe{"kafka", pub.Ping})
	} else {
		pub, err := kafkapub.New(ctx, cfg.brokers, cfg.topic, pubOpts)
		if err != nil {
			return err
		}
		defer pub.Close()
		publish = pub.Publish
		probes = append(probes, probe{"kafka", pub.Ping})
	}
	publish, stopDemo, err := cfg.demo.wrap(publish, log, mp)
	if err != nil {
		return err
	}
	defer stopDemo() // before the publisher closes

	publish, stopAudit, err := withAudit(ctx, cfg, publish, log)
	if err != nil {
		return err
	}
	defer stopAudit() // after the server stopped, before the publisher closes

	mux := http.NewServeMux()
	presets := map[string]idempotency.Provider{"github": idempotency.GitHub(), "jira": idempotency.JiraCloud()}
	var handlers []*idempotency.Handler
	for _, name := range cfg.providers {
		p := presets[name]
		opts := idempotency.Options{
			Provider: p, Check: check, RetryAfter: cfg.retryAfter, PendingTTL: cfg.pendingTTL,
			MaxBodyBytes: cfg.maxBodyBytes, ReadTimeout: cfg.readTimeout, AnswerTimeout: cfg.answerTimeout,
			MaxInFlight: cfg.maxInFlight, Logger: log, MeterProvider: mp,
		}
		if secret := cfg.secret(name); secret != "" {
			opts.Secret = []byte(secret)
		} else {
			log.Warn("ACCEPTING UNSIGNED DELIVERIES: no webhook secret, anyone who reaches this endpoint can forge events",
				"provider", p.Name, "path", "/webhooks/"+p.Name)
		}
		h, err := idempotency.NewHandler(store, publish, opts)
		if err != nil {
			return err
		}
		mux.Handle("POST /webhooks/"+p.Name, h)
		handlers = append(handlers, h)
	}

	tl, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return err
	}
	ln := &drainListener{TCPListener: tl.(*net.TCPListener)}
	conns := newConnTracker()
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: defaultReadHeaderTimeout,
		IdleTimeout:       time.Minute,
		ConnState:         conns.track,
	}
	readiness := newReadiness(probes, log)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", readiness.serve)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	pctx, stopProbes := context.WithCancel(context.Background())
	probing := make(chan struct{})
	go func() { defer close(probing); readiness.run(pctx) }()
	defer func() { stopProbes(); <-probing }()

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("gateway listening", "addr", ln.Addr().String(), "topic", cfg.topic, "store", cfg.store,
		"pipeline", cfg.pipeline, "providers", strings.Join(cfg.providers, ","))

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down: finishing deliveries in flight", "timeout", cfg.shutdownTimeout)
	readiness.stop()
	srv.SetKeepAlivesEnabled(false)
	// Take the connections the kernel has queued before the listener
	// closes (closing it would reset them, deliveries sent and all), then
	// stop serving new ones.
	ln.drain()
	servedErr := <-served
	// Let the connections that have not sent a request yet send it (or
	// be cut), since net/http drops a request it reads after Shutdown
	// began. Shutdown then closes idle connections and waits for the
	// others, which finish or are cut by their read deadlines (a slow
	// reader is answered 408, and retried).
	conns.readWaiting()
	sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
	defer cancel()
	err = srv.Shutdown(sctx)
	// The answered deliveries' "done" writes run after their handlers
	// returned: wait for them, or their keys stay pending until the TTL and
	// the providers' redeliveries are published again.
	for _, h := range handlers {
		_ = h.Close()
	}
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if !errors.Is(servedErr, errDrained) && !errors.Is(servedErr, http.ErrServerClosed) {
		return servedErr
	}
	log.Info("gateway stopped cleanly")
	return nil
}

// onlyEvents returns a Check that answers every event type outside events
// 200, unpublished (idempotency.ErrIgnored), before check; check itself
// when events is empty.
func onlyEvents(events []string, check func(context.Context, idempotency.Delivery) error) func(context.Context, idempotency.Delivery) error {
	if len(events) == 0 {
		return check
	}
	allowed := make(map[string]bool, len(events))
	for _, e := range events {
		allowed[e] = true
	}
	return func(ctx context.Context, d idempotency.Delivery) error {
		if !allowed[d.Event] {
			return fmt.Errorf("%w: event type %s is not in -events", idempotency.ErrIgnored, d.Event)
		}
		if check == nil {
			return nil
		}
		return check(ctx, d)
	}
}
