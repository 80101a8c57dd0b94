package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/idempotency/kafkapub"
	"github.com/exactlyonce/exactlyonce/idempotency/redisstore"
)

// Defaults of the binary that differ from the library's.
const (
	// defaultMaxBodyBytes is GitHub's largest payload, 25 MB: a delivery
	// that large still reaches Kafka compressed or through the claim
	// check, or is answered 413 with the reason, never cut short here.
	defaultMaxBodyBytes = 25 << 20
	// defaultReadHeaderTimeout bounds the request line and headers, which
	// a provider sends at once; the body has -read-timeout.
	defaultReadHeaderTimeout = 2 * time.Second
)

// providers are the endpoints the gateway can serve, by -providers name.
var providerNames = []string{"github", "jira"}

type config struct {
	pipeline        string
	logLevel        slog.Level
	listen          string
	providers       []string
	brokers         []string
	topic           string
	store           string
	redisAddr       string
	redisPrefix     string
	retryAfter      time.Duration
	pendingTTL      time.Duration
	maxBodyBytes    int64
	readTimeout     time.Duration
	answerTimeout   time.Duration
	maxInFlight     int
	compression     string
	claimCheck      claimCheck
	idempotent      bool
	events          string    // -events, comma-separated; empty: all
	demo            demoFlags // the demo harness's build only (demo.go)
	githubSecret    string
	jiraSecret      string
	acceptUnsigned  bool
	shutdownTimeout time.Duration
	kafka           kafkaSecurity
	audit           auditFlags // audit.go
}

// claimCheck is where payloads too large for a Kafka record go.
type claimCheck struct {
	bucket, prefix, endpoint, region string
	accessKeyID, secretAccessKey     string
}

// kafkaSecurity is how the gateway reaches a managed Kafka.
type kafkaSecurity struct {
	tls                bool
	ca                 string
	sasl, user, passwd string
}

// secret returns the webhook secret of a provider.
func (c config) secret(provider string) string {
	if provider == "github" {
		return c.githubSecret
	}
	return c.jiraSecret
}

// flags registers every setting on fs, each with its environment variable.
func flags(fs *flag.FlagSet, getenv func(string) string, c *config) (*settings, *string, *string, *string) {
	s := newSettings(fs, getenv)
	var brokers, providers, level string
	s.String(&c.pipeline, "pipeline", "GATEWAY_PIPELINE", "tenant-minute",
		"what to publish: tenant-minute (every signed delivery, keyed by the provider's tenant) or devmetrics (normalizable deliveries of the per-employee metrics, keyed by organisation; others answered 200 or 422 unpublished)")
	s.String(&level, "log-level", "LOG_LEVEL", "info", "log level: debug, info, warn or error")
	s.String(&c.listen, "listen", "GATEWAY_LISTEN", ":8080", "HTTP address")
	s.String(&providers, "providers", "GATEWAY_PROVIDERS", strings.Join(providerNames, ","),
		"the providers to serve, comma-separated: github (POST /webhooks/github), jira (POST /webhooks/jira); each needs its secret")
	s.String(&brokers, "brokers", "KAFKA_BROKERS", "localhost:9092", "Kafka bootstrap brokers, comma-separated")
	s.String(&c.topic, "topic", "KAFKA_TOPIC", "webhooks", "Kafka topic")
	s.String(&c.store, "store", "GATEWAY_STORE", "memory", "idempotency store: memory or redis")
	s.String(&c.redisAddr, "redis", "REDIS_ADDR", "localhost:6379", "Redis address for -store redis")
	s.String(&c.redisPrefix, "redis-prefix", "REDIS_PREFIX", redisstore.DefaultPrefix, "prefix of the idempotency keys in Redis, for gateways of several pipelines sharing one Redis")
	s.Duration(&c.retryAfter, "retry-after", "GATEWAY_RETRY_AFTER", idempotency.DefaultRetryAfter, "Retry-After of 503 answers: when a provider that honours it retries")
	s.Duration(&c.pendingTTL, "pending-ttl", "GATEWAY_PENDING_TTL", idempotency.DefaultPendingTTL,
		"life of a claim whose gateway died before completing it: redeliveries are answered 503 until it expires (must exceed 7s, the publish and store timeouts)")
	s.Int64(&c.maxBodyBytes, "max-body-bytes", "GATEWAY_MAX_BODY_BYTES", defaultMaxBodyBytes,
		"largest request body accepted; larger ones are answered 413 (GitHub sends up to 25 MB)")
	s.Duration(&c.readTimeout, "read-timeout", "GATEWAY_READ_TIMEOUT", idempotency.DefaultReadTimeout,
		"deadline for reading a request's whole body; a slower client is answered 408 and cut off")
	s.Duration(&c.answerTimeout, "answer-timeout", "GATEWAY_ANSWER_TIMEOUT", idempotency.DefaultAnswerTimeout,
		"deadline for answering a delivery, whatever Kafka and the store do (GitHub gives up after 10s); must exceed -read-timeout")
	s.Int(&c.maxInFlight, "max-in-flight", "GATEWAY_MAX_IN_FLIGHT", idempotency.DefaultMaxInFlight,
		"deliveries claimed and published at once per provider; one more is answered 503 at once")
	s.String(&c.compression, "compression", "KAFKA_COMPRESSION", kafkapub.DefaultCompression,
		"compression of Kafka batches: none, gzip, snappy, lz4 or zstd (a delivery too large for the topic uncompressed is sent alone with zstd)")
	s.String(&c.claimCheck.bucket, "claim-check-bucket", "CLAIM_CHECK_BUCKET", "",
		"S3 bucket for payloads too large for a Kafka record even compressed: stored under source/delivery-id before the record that refers to it (kafkapub.Payload reads them back); without it they are answered 413")
	s.String(&c.claimCheck.prefix, "claim-check-prefix", "CLAIM_CHECK_PREFIX", "", "object name prefix in -claim-check-bucket")
	s.String(&c.claimCheck.endpoint, "s3-endpoint", "S3_ENDPOINT", "", "S3-compatible server URL for -claim-check-bucket; empty for AWS")
	s.String(&c.claimCheck.region, "s3-region", "S3_REGION", "us-east-1", "S3 region of -claim-check-bucket")
	s.BoolOn(&c.idempotent, "idempotent-producer", "KAFKA_IDEMPOTENT",
		"publish with Kafka's idempotent producer (producer id and sequence numbers: the broker drops a batch sent again, and a delivery whose publish outlived its answer is held until the broker answers, so a redelivery never writes it twice); needs brokers with idempotence enabled, the default since Kafka 3.0. -idempotent-producer=false publishes with kafka-go's plain writer, for brokers without it: a delivery answered 503 while the broker did not answer may then be written twice, and the processor's dedup drops the copy")
	s.String(&c.githubSecret, "github-secret", "GITHUB_WEBHOOK_SECRET", "", "GitHub webhook secret")
	s.String(&c.jiraSecret, "jira-secret", "JIRA_WEBHOOK_SECRET", "", "Jira webhook secret")
	s.Bool(&c.acceptUnsigned, "accept-unsigned", "GATEWAY_ACCEPT_UNSIGNED",
		"accept deliveries without a signature for a provider that has no secret: anyone who can reach the gateway can forge events")
	s.Duration(&c.shutdownTimeout, "shutdown-timeout", "GATEWAY_SHUTDOWN_TIMEOUT", 20*time.Second,
		"how long SIGTERM waits for deliveries in flight (slow readers are cut at their -read-timeout)")
	s.Bool(&c.kafka.tls, "kafka-tls", "KAFKA_TLS", "connect to Kafka with TLS")
	s.String(&c.kafka.ca, "kafka-ca", "KAFKA_CA_FILE", "", "PEM file of the CA that signed the brokers' certificates; default the system's")
	s.String(&c.kafka.sasl, "kafka-sasl", "KAFKA_SASL", "", "SASL mechanism: plain, scram-sha-256 or scram-sha-512")
	s.String(&c.kafka.user, "kafka-user", "KAFKA_USER", "", "SASL user")
	s.String(&c.kafka.passwd, "kafka-password", "KAFKA_PASSWORD", "", "SASL password")
	s.String(&c.events, "events", "GATEWAY_EVENTS", "",
		"event types to publish, comma-separated (GitHub's X-GitHub-Event, Jira's webhookEvent); others are answered 200 and not published. Empty: every event type, known or not (GitHub's ping never)")
	c.demo.register(s)
	c.audit.register(s) // audit.go
	return s, &brokers, &providers, &level
}

// parse reads flags, each defaulting to its environment variable. -h
// prints the usage to fs's output and returns flag.ErrHelp.
func parse(args []string, getenv func(string) string, out io.Writer) (config, error) {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(out)
	var c config
	s, brokers, providers, level := flags(fs, getenv, &c)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage of gateway: every flag also reads the environment variable in brackets; the flag wins.\n")
		fs.PrintDefaults()
		fmt.Fprintf(fs.Output(), "  S3_ACCESS_KEY_ID, S3_SECRET_ACCESS_KEY (environment only)\n    \tcredentials of -claim-check-bucket\n")
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if err := errors.Join(s.errs...); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q (flags only; -h lists them)", fs.Args())
	}
	if err := c.logLevel.UnmarshalText([]byte(*level)); err != nil {
		return c, fmt.Errorf("-log-level %q: %w", *level, err)
	}
	c.claimCheck.accessKeyID, c.claimCheck.secretAccessKey = getenv("S3_ACCESS_KEY_ID"), getenv("S3_SECRET_ACCESS_KEY")
	c.brokers = list(*brokers)
	if len(c.brokers) == 0 {
		return c, errors.New("-brokers: no broker")
	}
	c.providers = list(*providers)
	if len(c.providers) == 0 {
		return c, errors.New("-providers: none; want github, jira or both")
	}
	for _, p := range c.providers {
		if !slices.Contains(providerNames, p) {
			return c, fmt.Errorf("-providers %q: unknown provider %q; want github, jira or both", *providers, p)
		}
	}
	if c.pipeline != "tenant-minute" && c.pipeline != "devmetrics" {
		return c, fmt.Errorf("-pipeline %q: want tenant-minute or devmetrics", c.pipeline)
	}
	if err := c.demo.validate(); err != nil {
		return c, err
	}
	if c.store != "memory" && c.store != "redis" {
		return c, fmt.Errorf("-store %q: want memory or redis", c.store)
	}
	if c.maxBodyBytes <= 0 {
		return c, fmt.Errorf("-max-body-bytes %d: want a positive size", c.maxBodyBytes)
	}
	if !c.acceptUnsigned {
		for _, p := range c.providers {
			if c.secret(p) == "" {
				return c, fmt.Errorf("no webhook secret for %s (-%s-secret, %s): refusing to start, since anyone could forge deliveries; set it, serve only the providers you use (-providers), or pass -accept-unsigned to accept unsigned deliveries knowingly",
					p, p, map[string]string{"github": "GITHUB_WEBHOOK_SECRET", "jira": "JIRA_WEBHOOK_SECRET"}[p])
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
