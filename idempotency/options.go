package idempotency

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// Defaults of Options.
const (
	// DefaultMaxBodyBytes bounds request bodies. GitHub caps payloads at
	// 25 MB but nearly all are far below 1 MB; raise it if you subscribe to
	// push events with very large commit lists.
	DefaultMaxBodyBytes = 5 << 20
	// DefaultPendingTTL is how long a claim lives if its owner dies between
	// Claim and Complete: a retry within it is answered 503, one after it
	// runs the side effect.
	DefaultPendingTTL = 30 * time.Second
	// DefaultDoneTTL is how long a done key replays its response: it must
	// cover the longest gap between retries of one delivery. GitHub lets
	// deliveries be redelivered for 3 days.
	DefaultDoneTTL = 72 * time.Hour
	// DefaultSideEffectTimeout bounds the side effect. GitHub records a
	// delivery as failed when the answer takes over 10 s.
	DefaultSideEffectTimeout = 5 * time.Second
	// DefaultStoreTimeout bounds each store call.
	DefaultStoreTimeout = 2 * time.Second
	// DefaultRetryAfter is the Retry-After of 503 answers.
	DefaultRetryAfter = 5 * time.Second
	// DefaultReadTimeout bounds reading the whole body, counted from the
	// start of ServeHTTP: a client slower than that is answered 408 and
	// its connection closed, so slow clients cannot hold the gateway. At
	// 4 s a 25 MB payload (GitHub's largest) needs about 6 MB/s.
	DefaultReadTimeout = 4 * time.Second
	// DefaultAnswerTimeout bounds the time from the start of ServeHTTP to
	// the answer: GitHub records a delivery as failed when no answer came
	// within 10 s, and the request's headers took some of that already.
	DefaultAnswerTimeout = 8 * time.Second
	// DefaultMaxInFlight bounds the deliveries claimed and published at
	// once; each holds its body in memory.
	DefaultMaxInFlight = 256
)

// HeaderReplayed is set to "true" on a response replayed from a done key.
const HeaderReplayed = "Idempotent-Replayed"

// Func is the side effect of a delivery, typically publishing it to Kafka.
// It returns nil only once the effect is durable (the broker acknowledged):
// the Handler then marks the key done and answers 2xx. It may be called again
// for the same delivery after an error, a timeout, or a crash, so it must
// carry d.Key along for downstream deduplication.
//
// ctx carries Options.SideEffectTimeout but is not cancelled when the client
// disconnects: a half-finished publish is worse than a finished one.
//
// An error says the effect did not happen, and releases the key for a
// retry, unless it wraps ErrOutcomeUnknown: then the effect may have
// happened, and the key is held until its PendingTTL. A Func that can
// learn its outcome may return after ctx ended, once it knows it: the
// Handler has answered 503 at the deadline meanwhile and keeps the key
// pending until the Func returns.
type Func func(ctx context.Context, d Delivery) error

// Options configures a Handler. Provider (or Key) is required: the zero
// Options refuse to start with ErrInvalidOptions, so that a Jira endpoint never
// reads GitHub's headers by default. Every other field's zero value is valid.
type Options struct {
	// Provider says where the provider puts the delivery id, the
	// signature, the event type and the tenant: GitHub() or JiraCloud().
	Provider Provider
	// Secret is the webhook's secret. When set, every request must carry
	// a valid Provider.SignatureHeader (401 otherwise). Default nil: no
	// check unless Verify is set.
	Secret []byte
	// Ignore lists event types the application does not consume (beyond
	// Provider.Ignore, GitHub's "ping"): they are answered 200, claim
	// nothing, publish nothing, and are counted in idempotency.ignored.
	// Subscribe the webhook to fewer events where you can.
	Ignore []string
	// Check validates or normalizes a verified delivery before anything is
	// claimed. Its error decides the answer:
	//   - a *RejectError (Reject(status, reason)): that 4xx with the
	//     reason; nothing claimed, nothing published. For payloads that
	//     can never be accepted.
	//   - an error wrapping ErrIgnored: 200, nothing published, counted.
	//   - any other error: 503 with Retry-After, as a transient failure.
	//     Jira retries it for about 30 minutes; GitHub does not retry.
	// Default nil: every verified delivery is accepted.
	Check func(ctx context.Context, d Delivery) error

	// Key returns a request's idempotency key. Default
	// HeaderKey(Provider.KeyHeader). Set it only for a provider without
	// a preset.
	Key KeyFunc
	// Verify checks the signature before anything else is looked at.
	// Default: the HMAC-SHA256 of Provider.SignatureHeader under Secret
	// when Secret is set, else no check.
	Verify Verifier
	// Source names the provider in each Delivery ("github", "jira").
	// Default Provider.Name.
	Source string
	// Fingerprint identifies the request's payload. A retry with the same
	// key and another fingerprint is refused with 422 and nothing is
	// published. Default BodyFingerprint; choose fields instead when a
	// provider's retries may differ in irrelevant bytes.
	Fingerprint func(d Delivery) string

	// MaxBodyBytes bounds the body (413 above). Default DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// ReadTimeout bounds reading the whole body, from the start of
	// ServeHTTP (408 and the connection closed after it). It needs the
	// ResponseWriter of net/http's server, which supports read deadlines
	// (http.ResponseController); in process, with another ResponseWriter,
	// the body is read without a deadline. Default DefaultReadTimeout.
	ReadTimeout time.Duration
	// AnswerTimeout bounds the time from the start of ServeHTTP to the
	// answer, whatever the store and the side effect do: the claim and
	// the side effect get what is left of it, and a side effect still
	// running at the deadline is answered 503 with Retry-After (and
	// Connection: close) while it goes on, its claim extended; its key is
	// then completed or released as the side effect ends. It must exceed
	// ReadTimeout.
	// Default DefaultAnswerTimeout.
	AnswerTimeout time.Duration
	// MaxInFlight bounds the deliveries past their body read (checked,
	// claimed, published, settled) at once. One more is answered 503 with
	// Retry-After at once, claims nothing and is counted in
	// idempotency.rejected (reason=busy). Clients still sending their body
	// do not count: ReadTimeout bounds them. Default DefaultMaxInFlight.
	MaxInFlight int
	// PendingTTL is the life of a claim, extended every third of it while
	// a side effect runs past its answer (with an Extender store). It
	// bounds how long a key stays pending after its gateway died, or
	// after a side effect whose outcome is unknown. It must exceed
	// SideEffectTimeout plus StoreTimeout, or a slow side effect could
	// lose its claim and a concurrent retry publish a second copy.
	// Default DefaultPendingTTL.
	PendingTTL time.Duration
	// DoneTTL is how long a done key replays its response. Past it, a
	// retry is published again (downstream dedup drops it). Default
	// DefaultDoneTTL.
	DoneTTL time.Duration
	// SideEffectTimeout is the deadline of Func's ctx. A Func may
	// overrun it to learn its outcome (see Func). Default
	// DefaultSideEffectTimeout.
	SideEffectTimeout time.Duration
	// StoreTimeout bounds each Store call. Default DefaultStoreTimeout.
	StoreTimeout time.Duration
	// RetryAfter is sent with every 503. Default DefaultRetryAfter.
	RetryAfter time.Duration

	// Now is the clock for latency metrics. Default time.Now.
	Now func() time.Time
	// Logger receives one line for every 503 answered, with its reason
	// (busy, pending, check, claim, claim_deadline, answer_deadline,
	// effect) and the key, and warnings about lost claims, failed store
	// calls and damaged stored responses. Default: discards.
	Logger *slog.Logger
	// MeterProvider receives the metrics. Default: no-op.
	MeterProvider metric.MeterProvider
}

func (o *Options) setDefaults() error {
	if o.Key == nil {
		if o.Provider.KeyHeader == "" {
			return fmt.Errorf("%w: Options.Provider is required (idempotency.GitHub() or idempotency.JiraCloud()), or an explicit Key", ErrInvalidOptions)
		}
		o.Key = HeaderKey(o.Provider.KeyHeader)
	}
	if o.Source == "" {
		o.Source = o.Provider.Name
	}
	if o.Verify == nil && o.Secret != nil {
		if o.Provider.SignatureHeader == "" {
			return fmt.Errorf("%w: Secret is set but Provider has no SignatureHeader", ErrInvalidOptions)
		}
		o.Verify = HMACSHA256(o.Provider.SignatureHeader, o.Secret)
	}
	if o.Fingerprint == nil {
		o.Fingerprint = BodyFingerprint
	}
	if err := durationDefaults([]durationOption{
		{"PendingTTL", &o.PendingTTL, DefaultPendingTTL},
		{"DoneTTL", &o.DoneTTL, DefaultDoneTTL},
		{"SideEffectTimeout", &o.SideEffectTimeout, DefaultSideEffectTimeout},
		{"StoreTimeout", &o.StoreTimeout, DefaultStoreTimeout},
		{"RetryAfter", &o.RetryAfter, DefaultRetryAfter},
		{"ReadTimeout", &o.ReadTimeout, DefaultReadTimeout},
		{"AnswerTimeout", &o.AnswerTimeout, DefaultAnswerTimeout},
	}); err != nil {
		return err
	}
	if o.MaxBodyBytes < 0 {
		return fmt.Errorf("%w: MaxBodyBytes %d is negative", ErrInvalidOptions, o.MaxBodyBytes)
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.MaxInFlight < 0 {
		return fmt.Errorf("%w: MaxInFlight %d is negative", ErrInvalidOptions, o.MaxInFlight)
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	if o.AnswerTimeout <= o.ReadTimeout {
		return fmt.Errorf("%w: AnswerTimeout %v must exceed ReadTimeout %v", ErrInvalidOptions, o.AnswerTimeout, o.ReadTimeout)
	}
	if o.PendingTTL <= o.SideEffectTimeout+o.StoreTimeout {
		return fmt.Errorf("%w: PendingTTL %v must exceed SideEffectTimeout %v + StoreTimeout %v",
			ErrInvalidOptions, o.PendingTTL, o.SideEffectTimeout, o.StoreTimeout)
	}
	if o.DoneTTL < o.PendingTTL {
		return fmt.Errorf("%w: DoneTTL %v is shorter than PendingTTL %v", ErrInvalidOptions, o.DoneTTL, o.PendingTTL)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MeterProvider == nil {
		o.MeterProvider = noop.NewMeterProvider()
	}
	return nil
}

// durationOption is a duration field of an options struct, by name, with
// its default.
type durationOption struct {
	name string
	v    *time.Duration
	def  time.Duration
}

// durationDefaults refuses a negative duration with ErrInvalidOptions,
// naming the field, and sets each zero one to its default.
func durationDefaults(ds []durationOption) error {
	for _, d := range ds {
		if *d.v < 0 {
			return fmt.Errorf("%w: %s %v is negative", ErrInvalidOptions, d.name, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	return nil
}
