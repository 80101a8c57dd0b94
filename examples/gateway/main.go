// Command gateway receives GitHub and Jira webhooks and publishes each
// delivery to Kafka exactly once per delivery id (package idempotency with a
// memory or Redis store, and idempotency/kafkapub), answering 2xx only once
// Kafka has acknowledged the event.
//
//	gateway -brokers kafka:9092 -topic webhooks -store redis -redis redis:6379 \
//		-github-secret "$GITHUB_WEBHOOK_SECRET" -jira-secret "$JIRA_WEBHOOK_SECRET"
//
// Endpoints: POST /webhooks/github, POST /webhooks/jira, GET /healthz
// (the process runs), GET /readyz (it accepts deliveries), GET /metrics
// (the SDK's OpenTelemetry metrics in the Prometheus format). Its settings
// have environment variables (-h lists them). It refuses to start without
// a webhook secret for each provider unless -accept-unsigned is given, and
// then warns at start and on every unsigned delivery's provider.
//
// -pipeline says what it publishes. tenant-minute (the default) publishes
// every signed delivery, keyed by the provider's tenant: a gateway you can
// point any GitHub or Jira hook at, whose records the processor's default
// chain counts per tenant and minute. devmetrics publishes only what the
// per-employee metrics of package examples/devmetrics count, keyed by
// organisation; it answers other activities 200 and payloads it cannot
// normalize 422 with the reason, unpublished.
//
// -idempotent-producer publishes through kafkapub.NewIdempotent: the
// broker drops a batch the producer retries after a lost acknowledgement,
// so a lost ack writes no duplicate (the default, kafkapub.New, writes it
// again; the processor's dedup drops it either way).
//
// -inject-publish-failures and -inject-lost-acks make a fraction of Kafka
// publishes fail before or after the write, for demos and tests (make demo
// uses them); the gateway warns loudly when they are set.
//
// On SIGTERM or SIGINT it stops being ready, stops accepting connections,
// finishes the deliveries in flight (bounded by -shutdown-timeout) and
// closes the Kafka writer; a delivery cut short is answered 503 or not at
// all, so the provider retries it.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
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
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/exactlyonce/exactlyonce/examples/devmetrics"
	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/idempotency/kafkapub"
	"github.com/exactlyonce/exactlyonce/idempotency/redisstore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr); err != nil {
		slog.New(slog.NewJSONHandler(os.Stderr, nil)).Error("gateway stopped", "err", err)
		os.Exit(1)
	}
}

// levelFlag is a flag's default log level; an unknown name is reported by
// the flag package when it parses it.
func levelFlag(name string) *slog.Level {
	l := new(slog.Level)
	_ = l.UnmarshalText([]byte(name))
	return l
}

type config struct {
	pipeline        string
	logLevel        slog.Level
	listen          string
	brokers         []string
	topic           string
	store           string
	redisAddr       string
	redisPrefix     string
	retryAfter      time.Duration
	pendingTTL      time.Duration
	idempotent      bool
	naive           bool
	faults          faultRates
	githubSecret    string
	jiraSecret      string
	acceptUnsigned  bool
	shutdownTimeout time.Duration
	kafka           kafkaSecurity
}

// kafkaSecurity is how the gateway reaches a managed Kafka.
type kafkaSecurity struct {
	tls                bool
	ca                 string
	sasl, user, passwd string
}

// parse reads flags, each defaulting to its environment variable.
func parse(args []string, getenv func(string) string) (config, error) {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	var c config
	var brokers string
	fs.StringVar(&c.pipeline, "pipeline", env("GATEWAY_PIPELINE", "tenant-minute"),
		"what to publish: tenant-minute (every signed delivery, keyed by the provider's tenant) or devmetrics (normalizable deliveries of the per-employee metrics, keyed by organisation; others answered 200 or 422 unpublished) (GATEWAY_PIPELINE)")
	fs.TextVar(&c.logLevel, "log-level", levelFlag(env("LOG_LEVEL", "info")), "log level: debug, info, warn or error (LOG_LEVEL)")
	fs.StringVar(&c.listen, "listen", env("GATEWAY_LISTEN", ":8080"), "HTTP address (GATEWAY_LISTEN)")
	fs.StringVar(&brokers, "brokers", env("KAFKA_BROKERS", "localhost:9092"), "Kafka bootstrap brokers, comma-separated (KAFKA_BROKERS)")
	fs.StringVar(&c.topic, "topic", env("KAFKA_TOPIC", "webhooks"), "Kafka topic (KAFKA_TOPIC)")
	fs.StringVar(&c.store, "store", env("GATEWAY_STORE", "memory"), "idempotency store: memory or redis (GATEWAY_STORE)")
	fs.StringVar(&c.redisAddr, "redis", env("REDIS_ADDR", "localhost:6379"), "Redis address for -store redis (REDIS_ADDR)")
	fs.StringVar(&c.redisPrefix, "redis-prefix", env("REDIS_PREFIX", redisstore.DefaultPrefix), "prefix of the idempotency keys in Redis, for gateways of several pipelines sharing one Redis (REDIS_PREFIX)")
	fs.DurationVar(&c.retryAfter, "retry-after", idempotency.DefaultRetryAfter, "Retry-After of 503 answers: when a provider that honours it retries")
	fs.DurationVar(&c.pendingTTL, "pending-ttl", idempotency.DefaultPendingTTL, "life of a claim whose gateway died before completing it: redeliveries are answered 503 until it expires (must exceed 7s, the publish and store timeouts)")
	fs.BoolVar(&c.idempotent, "idempotent-producer", env("KAFKA_IDEMPOTENT", "") == "true",
		"publish with Kafka's idempotent producer (producer id and sequence numbers: the broker drops a batch retried after a lost acknowledgement instead of writing it twice); needs brokers with idempotence enabled, the default since Kafka 3.0 (KAFKA_IDEMPOTENT=true)")
	naive := fs.String("naive", "", "FOR DEMONSTRATION: gateway answers 2xx before Kafka acknowledged the event (the first article's bug: a failed publish is lost); make demo NAIVE=gateway")
	fs.StringVar(&c.githubSecret, "github-secret", env("GITHUB_WEBHOOK_SECRET", ""), "GitHub webhook secret (GITHUB_WEBHOOK_SECRET)")
	fs.StringVar(&c.jiraSecret, "jira-secret", env("JIRA_WEBHOOK_SECRET", ""), "Jira webhook secret (JIRA_WEBHOOK_SECRET)")
	fs.BoolVar(&c.acceptUnsigned, "accept-unsigned", env("GATEWAY_ACCEPT_UNSIGNED", "") == "true",
		"accept deliveries without a signature for a provider that has no secret: anyone who can reach the gateway can forge events (GATEWAY_ACCEPT_UNSIGNED=true)")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 20*time.Second, "how long SIGTERM waits for deliveries in flight")
	fs.BoolVar(&c.kafka.tls, "kafka-tls", env("KAFKA_TLS", "") == "true", "connect to Kafka with TLS (KAFKA_TLS=true)")
	fs.StringVar(&c.kafka.ca, "kafka-ca", env("KAFKA_CA_FILE", ""), "PEM file of the CA that signed the brokers' certificates; default the system's (KAFKA_CA_FILE)")
	fs.StringVar(&c.kafka.sasl, "kafka-sasl", env("KAFKA_SASL", ""), "SASL mechanism: plain, scram-sha-256 or scram-sha-512 (KAFKA_SASL)")
	fs.StringVar(&c.kafka.user, "kafka-user", env("KAFKA_USER", ""), "SASL user (KAFKA_USER)")
	fs.StringVar(&c.kafka.passwd, "kafka-password", env("KAFKA_PASSWORD", ""), "SASL password (KAFKA_PASSWORD)")
	c.faults.flags(fs)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	c.brokers = strings.Split(brokers, ",")
	if c.pipeline != "tenant-minute" && c.pipeline != "devmetrics" {
		return c, fmt.Errorf("-pipeline %q: want tenant-minute or devmetrics", c.pipeline)
	}
	switch *naive {
	case "":
	case "gateway":
		c.naive = true
	default:
		return c, fmt.Errorf("-naive %q: the gateway runs only the naive gateway", *naive)
	}
	if err := c.faults.validate(); err != nil {
		return c, err
	}
	if c.store != "memory" && c.store != "redis" {
		return c, fmt.Errorf("-store %q: want memory or redis", c.store)
	}
	if !c.acceptUnsigned {
		for name, secret := range map[string]string{"GitHub (-github-secret, GITHUB_WEBHOOK_SECRET)": c.githubSecret, "Jira (-jira-secret, JIRA_WEBHOOK_SECRET)": c.jiraSecret} {
			if secret == "" {
				return c, fmt.Errorf("no webhook secret for %s: refusing to start, since anyone could forge deliveries; set it, or pass -accept-unsigned to accept unsigned deliveries knowingly", name)
			}
		}
	}
	return c, nil
}

// transport returns kafka-go's Transport for the security flags.
func (k kafkaSecurity) transport() (*kafka.Transport, error) {
	t := &kafka.Transport{}
	if k.tls {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if k.ca != "" {
			pem, err := os.ReadFile(k.ca)
			if err != nil {
				return nil, fmt.Errorf("-kafka-ca: %w", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("-kafka-ca %s: no certificate", k.ca)
			}
		}
		t.TLS = cfg
	}
	var err error
	t.SASL, err = k.mechanism()
	return t, err
}

func (k kafkaSecurity) mechanism() (sasl.Mechanism, error) {
	switch strings.ToLower(k.sasl) {
	case "":
		return nil, nil
	case "plain":
		return plain.Mechanism{Username: k.user, Password: k.passwd}, nil
	case "scram-sha-256":
		return scram.Mechanism(scram.SHA256, k.user, k.passwd)
	case "scram-sha-512":
		return scram.Mechanism(scram.SHA512, k.user, k.passwd)
	}
	return nil, fmt.Errorf("-kafka-sasl %q: want plain, scram-sha-256 or scram-sha-512", k.sasl)
}

func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	cfg, err := parse(args, getenv)
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
	pubOpts := kafkapub.Options{Transport: transport, Logger: log, MeterProvider: mp}
	var check func(context.Context, idempotency.Delivery) error
	if cfg.pipeline == "devmetrics" {
		// Normalize before claiming: what the metrics do not count is
		// answered 200, what cannot be normalized 422, neither published;
		// one organisation's events go to one partition.
		check, pubOpts.PartitionKey = devmetrics.Check, devmetrics.PartitionKey
	}
	var publish idempotency.Func
	if cfg.idempotent {
		pub, err := kafkapub.NewIdempotent(ctx, cfg.brokers, cfg.topic, pubOpts)
		if err != nil {
			return err
		}
		defer pub.Close()
		publish = pub.Publish
	} else {
		pub, err := kafkapub.New(ctx, cfg.brokers, cfg.topic, pubOpts)
		if err != nil {
			return err
		}
		defer pub.Close()
		publish = pub.Publish
	}
	if cfg.faults.on() {
		log.Warn("INJECTING KAFKA PUBLISH FAULTS: for demos and tests only", "fail_before_write", cfg.faults.before, "lose_ack", cfg.faults.after)
		f, err := newFaultyPublish(publish, cfg.faults, mp)
		if err != nil {
			return err
		}
		publish = f.publish
	}

	if cfg.naive {
		log.Warn("NAIVE GATEWAY: deliveries are answered 2xx before Kafka acknowledged them; a failed publish loses the event (for demonstrations only)")
		n := &naivePublish{next: publish, log: log}
		defer n.wait() // before the publisher closes
		publish = n.publish
	}

	mux := http.NewServeMux()
	for _, p := range []struct {
		provider idempotency.Provider
		secret   string
	}{{idempotency.GitHub(), cfg.githubSecret}, {idempotency.JiraCloud(), cfg.jiraSecret}} {
		opts := idempotency.Options{Provider: p.provider, Check: check, RetryAfter: cfg.retryAfter, PendingTTL: cfg.pendingTTL, Logger: log, MeterProvider: mp}
		if p.secret != "" {
			opts.Secret = []byte(p.secret)
		} else {
			log.Warn("ACCEPTING UNSIGNED DELIVERIES: no webhook secret, anyone who reaches this endpoint can forge events",
				"provider", p.provider.Name, "path", "/webhooks/"+p.provider.Name)
		}
		h, err := idempotency.NewHandler(store, publish, opts)
		if err != nil {
			return err
		}
		mux.Handle("POST /webhooks/"+p.provider.Name, h)
	}
	var ready atomic.Bool
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	ready.Store(true)
	log.Info("gateway listening", "addr", ln.Addr().String(), "topic", cfg.topic, "store", cfg.store, "pipeline", cfg.pipeline)

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down: finishing deliveries in flight", "timeout", cfg.shutdownTimeout)
	ready.Store(false)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	log.Info("gateway stopped cleanly")
	return nil
}
