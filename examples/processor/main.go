// Command processor reads the gateway's topic with a consumer group and
// runs one checkpointed chain per partition into ClickHouse, exactly once
// across crashes, restarts and rebalances. -pipeline picks the chain:
// tenant-minute (the default, chain.go: dedup by delivery id, the events,
// one-minute counts per tenant), the smallest complete chain and the one
// to copy for your own; or devmetrics (package examples/devmetrics: the
// articles' per-employee hourly metrics with early firings and a
// dead-letter topic, -dlq), which reads what a gateway with -pipeline
// devmetrics publishes. Each creates its tables unless
// -create-tables=false.
//
//	processor -brokers kafka:9092 -topic webhooks -group processor \
//		-clickhouse clickhouse:9000 -database webhooks -state-dir /var/lib/processor
//
// -state-dir holds the checkpoints and the sinks' journals: every instance
// of the group must share it (a shared disk), so a partition that moves
// restores its state. Endpoints on -listen: /healthz, /readyz (the chains
// run), /metrics (the SDK's OpenTelemetry metrics in the Prometheus
// format). Its settings have environment variables (-h lists them).
//
// A chain whose ClickHouse or Kafka is unreachable restarts from its last
// checkpoint with backoff while the others go on (kafkasource.Restart); a
// permanent error (a record that cannot be processed, a journal that does
// not match) stops the process with status 1, for a supervisor to see. On
// SIGTERM or SIGINT it stops being ready, takes a last checkpoint (so the
// next owner replays nothing), and stops.
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

	"github.com/ClickHouse/ch-go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/checkpoint/s3storage"
	"github.com/exactlyonce/exactlyonce/examples/devmetrics"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr); err != nil {
		slog.New(slog.NewJSONHandler(os.Stderr, nil)).Error("processor stopped", "err", err)
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
	pipeline               string
	logLevel               slog.Level
	deadLetterTopic        string
	demo                   demoFlags           // the demo harness's build only (demo.go)
	group                  kafkasource.Options // the consumer group's timing
	sinkMaxDelay           time.Duration
	listen, topic, groupID string
	groupProtocol          kafkasource.GroupProtocol
	groupInstanceID        string
	brokers                []string
	stateDir               string
	s3                     s3State
	interval               time.Duration
	createTables           bool
	chAddr, database       string
	chUser, chPassword     string
	chTLS                  bool
	chCA                   string
	kafkaTLS               bool
	kafkaCA                string
	kafkaSASL, kafkaUser   string
	kafkaPassword          string
	lastCheckpointTimeout  time.Duration
	audit                  bool   // audit.go
	auditTopic             string // audit.go
}

func parse(args []string, getenv func(string) string) (config, error) {
	fs := flag.NewFlagSet("processor", flag.ContinueOnError)
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	var c config
	var brokers string
	fs.StringVar(&c.pipeline, "pipeline", env("PROCESSOR_PIPELINE", "tenant-minute"),
		"the chain: tenant-minute (chain.go: events, counts per tenant and minute) or devmetrics (package examples/devmetrics: per-employee hourly metrics, for a gateway with -pipeline devmetrics) (PROCESSOR_PIPELINE)")
	fs.StringVar(&c.deadLetterTopic, "dlq", env("KAFKA_DLQ_TOPIC", ""),
		"devmetrics: dead-letter topic of records it cannot normalize, each written once; empty: such a record stops the process (KAFKA_DLQ_TOPIC)")
	c.demo.register(fs)
	fs.TextVar(&c.logLevel, "log-level", levelFlag(env("LOG_LEVEL", "info")), "log level: debug, info, warn or error (LOG_LEVEL)")
	fs.DurationVar(&c.group.SessionTimeout, "session-timeout", kafkasource.DefaultSessionTimeout, "consumer group session timeout: how soon a dead instance's partitions move")
	fs.DurationVar(&c.group.RebalanceTimeout, "rebalance-timeout", kafkasource.DefaultRebalanceTimeout, "consumer group rebalance timeout")
	fs.DurationVar(&c.group.HeartbeatInterval, "heartbeat-interval", kafkasource.DefaultHeartbeatInterval, "consumer group heartbeat interval")
	fs.DurationVar(&c.group.MaxWait, "fetch-max-wait", kafkasource.DefaultMaxWait, "longest wait of a fetch for new records")
	fs.DurationVar(&c.sinkMaxDelay, "sink-max-delay", chsink.DefaultMaxDelay, "longest time a row waits in a sink's buffer before it is inserted")
	fs.StringVar(&c.listen, "listen", env("PROCESSOR_LISTEN", ":8081"), "HTTP address of /healthz, /readyz, /metrics (PROCESSOR_LISTEN)")
	fs.StringVar(&brokers, "brokers", env("KAFKA_BROKERS", "localhost:9092"), "Kafka bootstrap brokers, comma-separated (KAFKA_BROKERS)")
	fs.StringVar(&c.topic, "topic", env("KAFKA_TOPIC", "webhooks"), "Kafka topic (KAFKA_TOPIC)")
	fs.StringVar(&c.groupID, "group", env("KAFKA_GROUP", "processor"), "consumer group (KAFKA_GROUP)")
	var protocol string
	fs.StringVar(&protocol, "group-protocol", env("KAFKA_GROUP_PROTOCOL", "auto"),
		"consumer group protocol: auto (consumer where the brokers offer it and the group can take it, else classic); consumer (Kafka 4's KIP-848: a rebalance stops only the partitions that move); or classic. A rolling restart moves a running group from one to the other (KAFKA_GROUP_PROTOCOL)")
	fs.StringVar(&c.groupInstanceID, "group-instance-id", env("KAFKA_GROUP_INSTANCE_ID", ""),
		"static membership under -group-protocol consumer or auto: an id of this instance's own, stable across restarts (a StatefulSet pod's name), so that a restart within the broker's session timeout gets the same partitions back and moves nothing (KAFKA_GROUP_INSTANCE_ID)")
	fs.StringVar(&c.stateDir, "state-dir", env("PROCESSOR_STATE_DIR", "./state"), "checkpoints and sink journals, shared by every instance (PROCESSOR_STATE_DIR)")
	fs.StringVar(&c.s3.bucket, "s3-bucket", env("S3_BUCKET", ""), "keep checkpoints and sink journals in this S3 bucket instead of -state-dir: what processors on several machines share (S3_BUCKET)")
	fs.StringVar(&c.s3.prefix, "s3-prefix", env("S3_PREFIX", ""), "object name prefix in -s3-bucket (S3_PREFIX)")
	fs.StringVar(&c.s3.endpoint, "s3-endpoint", env("S3_ENDPOINT", ""), "S3-compatible server URL; empty for AWS (S3_ENDPOINT)")
	fs.StringVar(&c.s3.region, "s3-region", env("S3_REGION", "us-east-1"), "S3 region (S3_REGION)")
	c.s3.accessKeyID, c.s3.secretAccessKey = getenv("S3_ACCESS_KEY_ID"), getenv("S3_SECRET_ACCESS_KEY")
	fs.DurationVar(&c.interval, "checkpoint-interval", time.Second, "time between checkpoints")
	fs.BoolVar(&c.createTables, "create-tables", env("PROCESSOR_CREATE_TABLES", "true") == "true", "create the database and tables if missing (PROCESSOR_CREATE_TABLES)")
	fs.StringVar(&c.chAddr, "clickhouse", env("CLICKHOUSE_ADDR", "localhost:9000"), "ClickHouse native protocol address (CLICKHOUSE_ADDR)")
	fs.StringVar(&c.database, "database", env("CLICKHOUSE_DATABASE", "webhooks"), "ClickHouse database (CLICKHOUSE_DATABASE)")
	fs.StringVar(&c.chUser, "clickhouse-user", env("CLICKHOUSE_USER", ""), "ClickHouse user (CLICKHOUSE_USER)")
	fs.StringVar(&c.chPassword, "clickhouse-password", env("CLICKHOUSE_PASSWORD", ""), "ClickHouse password (CLICKHOUSE_PASSWORD)")
	fs.BoolVar(&c.chTLS, "clickhouse-tls", env("CLICKHOUSE_TLS", "") == "true", "connect to ClickHouse with TLS, e.g. port 9440 (CLICKHOUSE_TLS=true)")
	fs.StringVar(&c.chCA, "clickhouse-ca", env("CLICKHOUSE_CA_FILE", ""), "PEM CA file for ClickHouse TLS; default the system's (CLICKHOUSE_CA_FILE)")
	fs.BoolVar(&c.kafkaTLS, "kafka-tls", env("KAFKA_TLS", "") == "true", "connect to Kafka with TLS (KAFKA_TLS=true)")
	fs.StringVar(&c.kafkaCA, "kafka-ca", env("KAFKA_CA_FILE", ""), "PEM CA file for Kafka TLS; default the system's (KAFKA_CA_FILE)")
	fs.StringVar(&c.kafkaSASL, "kafka-sasl", env("KAFKA_SASL", ""), "SASL mechanism: plain, scram-sha-256 or scram-sha-512 (KAFKA_SASL)")
	fs.StringVar(&c.kafkaUser, "kafka-user", env("KAFKA_USER", ""), "SASL user (KAFKA_USER)")
	fs.StringVar(&c.kafkaPassword, "kafka-password", env("KAFKA_PASSWORD", ""), "SASL password (KAFKA_PASSWORD)")
	fs.DurationVar(&c.lastCheckpointTimeout, "shutdown-timeout", 20*time.Second, "how long SIGTERM waits for the last checkpoint")
	fs.BoolVar(&c.audit, "audit", env("PROCESSOR_AUDIT", "") == "true", "devmetrics: count every stage per organisation and minute into the audit table (cmd/exactlyonce audit) (PROCESSOR_AUDIT=true)")
	fs.StringVar(&c.auditTopic, "audit-topic", env("KAFKA_AUDIT_TOPIC", ""), "also fold the gateways' audit counts from this topic into the audit table (KAFKA_AUDIT_TOPIC)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	c.brokers = strings.Split(brokers, ",")
	switch protocol {
	case "classic":
		c.groupProtocol = kafkasource.ProtocolClassic
	case "consumer":
		c.groupProtocol = kafkasource.ProtocolConsumer
	case "auto":
		c.groupProtocol = kafkasource.ProtocolAuto
	default:
		return c, fmt.Errorf("-group-protocol %q: want classic, consumer or auto", protocol)
	}
	if c.groupInstanceID != "" && c.groupProtocol == kafkasource.ProtocolClassic {
		return c, errors.New("-group-instance-id: static membership needs -group-protocol consumer (or auto)")
	}
	if c.pipeline != "tenant-minute" && c.pipeline != "devmetrics" {
		return c, fmt.Errorf("-pipeline %q: want tenant-minute or devmetrics", c.pipeline)
	}
	if _, err := c.demo.naives(c.pipeline); err != nil {
		return c, err
	}
	if c.deadLetterTopic != "" && c.pipeline != "devmetrics" {
		return c, errors.New("-dlq: only the devmetrics chain has a dead-letter topic")
	}
	return c, checkAudit(c)
}

func tlsConfig(ca string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: no certificate", ca)
		}
	}
	return cfg, nil
}

func mechanism(name, user, password string) (sasl.Mechanism, error) {
	switch strings.ToLower(name) {
	case "":
		return nil, nil
	case "plain":
		return plain.Mechanism{Username: user, Password: password}, nil
	case "scram-sha-256":
		return scram.Mechanism(scram.SHA256, user, password)
	case "scram-sha-512":
		return scram.Mechanism(scram.SHA512, user, password)
	}
	return nil, fmt.Errorf("-kafka-sasl %q: want plain, scram-sha-256 or scram-sha-512", name)
}

func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	cfg, err := parse(args, getenv)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: cfg.logLevel}))
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(context.Background())

	dialer := &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true}
	if cfg.kafkaTLS {
		if dialer.TLS, err = tlsConfig(cfg.kafkaCA); err != nil {
			return fmt.Errorf("-kafka-ca: %w", err)
		}
	}
	if dialer.SASLMechanism, err = mechanism(cfg.kafkaSASL, cfg.kafkaUser, cfg.kafkaPassword); err != nil {
		return err
	}
	chOpts := ch.Options{Address: cfg.chAddr, User: cfg.chUser, Password: cfg.chPassword, Compression: ch.CompressionLZ4}
	if cfg.chTLS {
		if chOpts.TLS, err = tlsConfig(cfg.chCA); err != nil {
			return fmt.Errorf("-clickhouse-ca: %w", err)
		}
	}
	storage, err := openStorage(cfg)
	if err != nil {
		return err
	}
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{Logger: log})
	if err != nil {
		return err
	}
	now := cfg.demo.clock(ctx) // nil (time.Now) but in the chaos run's build
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: cfg.interval, Logger: log, MeterProvider: mp, Now: now})
	if err != nil {
		return err
	}
	defer coord.Close()
	db := chsink.DB{Addr: cfg.chAddr, Database: cfg.database}
	sinkOpts := chsink.Options{User: cfg.chUser, Password: cfg.chPassword, Client: chOpts,
		MaxDelay: cfg.sinkMaxDelay, Logger: log, MeterProvider: mp, Now: now}
	var chain kafkasource.BuildChain
	naives, _ := cfg.demo.naives(cfg.pipeline) // checked by parse
	switch cfg.pipeline {
	case "devmetrics":
		if cfg.createTables {
			if err := devmetrics.CreateTables(ctx, chOpts, cfg.database); err != nil {
				return err
			}
			if err := cfg.demo.createTables(ctx, chOpts, cfg.database); err != nil {
				return err
			}
		}
		chain = devmetrics.BuildChain(devmetrics.Config{
			ClickHouse: db, Sink: sinkOpts, Logger: log,
			DeadLetterTopic:     cfg.deadLetterTopic,
			Naive:               naives,
			DeadLetterTransport: &kafka.Transport{TLS: dialer.TLS, SASL: dialer.SASLMechanism},
			Audit:               cfg.audit,
			Now:                 now,
		})
	default:
		if cfg.createTables {
			if err := createTables(ctx, chOpts, cfg.database); err != nil {
				return err
			}
		}
		chain = newChain(chainConfig{ClickHouse: db, Sink: sinkOpts, Logger: log})
	}
	if chain, err = withAudit(ctx, cfg, chOpts, db, sinkOpts, chain); err != nil {
		return err
	}
	chain = cfg.demo.withOutput(chain, cfg.topic, cfg.brokers, cfg.interval) // the chaos run's build only
	srcOpts := cfg.group
	srcOpts.Dialer, srcOpts.Logger, srcOpts.MeterProvider = dialer, log, mp
	src, err := kafkasource.New(kafkasource.Group{Brokers: cfg.brokers, ID: cfg.groupID, Topics: auditTopics(cfg), Protocol: cfg.groupProtocol,
		InstanceID: cfg.groupInstanceID},
		coord, kafkasource.Chains(store, chain), srcOpts)
	if err != nil {
		return err
	}

	var ready atomic.Bool
	mux := http.NewServeMux()
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
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	log.Info("processor running", "addr", ln.Addr().String(), "topic", cfg.topic, "group", cfg.groupID, "clickhouse", cfg.chAddr, "pipeline", cfg.pipeline)

	// Run gets its own context: on SIGTERM the last checkpoint is taken
	// while the chains still run, and only then are they stopped.
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRun()
	done := make(chan error, 1)
	go func() { done <- src.Run(runCtx) }()
	ready.Store(true)
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	ready.Store(false)
	log.Info("shutting down: taking a last checkpoint")
	cctx, cancel := context.WithTimeout(context.Background(), cfg.lastCheckpointTimeout)
	err = src.Checkpoint(cctx)
	cancel()
	if err != nil {
		log.Warn("last checkpoint failed; the next owner replays from the previous one", "err", err)
	} else {
		log.Info("last checkpoint taken")
	}
	stopRun()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	log.Info("processor stopped cleanly")
	return nil
}

// s3State is where -s3-bucket keeps checkpoints and journals. Credentials
// come only from the environment, never from flags that ps would show.
type s3State struct {
	bucket, prefix, endpoint, region string
	accessKeyID, secretAccessKey     string
}

// openStorage returns the checkpoint storage every instance of the
// processor shares: an S3 bucket, fenced by its conditional writes, when
// -s3-bucket is set, else the -state-dir directory (one machine, or a
// shared POSIX filesystem).
func openStorage(cfg config) (checkpoint.Storage, error) {
	if cfg.s3.bucket == "" {
		return checkpoint.NewFSStorage(cfg.stateDir)
	}
	client := s3storage.NewClient(s3storage.ClientConfig{
		Endpoint:        cfg.s3.endpoint,
		Region:          cfg.s3.region,
		AccessKeyID:     cfg.s3.accessKeyID,
		SecretAccessKey: cfg.s3.secretAccessKey,
	})
	st, err := s3storage.New(client, cfg.s3.bucket, s3storage.Options{Prefix: cfg.s3.prefix})
	if err != nil {
		return nil, fmt.Errorf("-s3-bucket: %w", err)
	}
	return st, nil
}
