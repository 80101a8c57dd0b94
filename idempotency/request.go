package idempotency

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/exactlyonce/exactlyonce/internal/jsonscan"
)

// Header names of the providers' delivery ids and signatures.
const (
	// HeaderGitHubDelivery carries GitHub's delivery GUID. A redelivery of
	// the same event carries the same GUID.
	HeaderGitHubDelivery = "X-GitHub-Delivery"
	// HeaderGitHubSignature carries "sha256=" and the hex HMAC-SHA256 of the
	// body under the webhook's secret.
	HeaderGitHubSignature = "X-Hub-Signature-256"
	// HeaderJiraWebhookID carries Jira Cloud's webhook identifier, the same
	// across Jira's retries of one webhook.
	HeaderJiraWebhookID = "X-Atlassian-Webhook-Identifier"
)

// MaxKeyBytes bounds the length of an idempotency key. Longer keys are
// rejected with 400 before anything is claimed.
const MaxKeyBytes = 512

// Errors that reject a request before anything is claimed.
var (
	// ErrBodyTooLarge: the body exceeds Options.MaxBodyBytes (413).
	ErrBodyTooLarge = errors.New("idempotency: request body too large")
	// ErrSignature: the signature is missing or wrong (401).
	ErrSignature = errors.New("idempotency: bad signature")
	// ErrNoKey: the request carries no usable idempotency key (400).
	ErrNoKey = errors.New("idempotency: no idempotency key")
	// ErrMalformed: the body is not a JSON object in valid UTF-8, or the
	// event type is missing (400).
	ErrMalformed = errors.New("idempotency: malformed body")
	// ErrMediaType: the request's Content-Type is not one the provider
	// sends (Provider.ContentTypes), or names a charset other than UTF-8
	// (415).
	ErrMediaType = errors.New("idempotency: unsupported content type")
	// ErrNoPartition: the payload names no tenant to partition it by
	// (Provider.Partition); answered 422.
	ErrNoPartition = errors.New("idempotency: payload has no partition key")
	// ErrIgnored is returned, wrapped, by an Options.Check hook for an event
	// the application does not consume: it is answered 200, claims nothing,
	// publishes nothing, and is counted in idempotency.ignored.
	ErrIgnored = errors.New("idempotency: event not consumed")
)

// RejectError is a permanent rejection of a delivery by an Options.Check
// hook: the Handler answers Status with Reason, claims nothing and publishes
// nothing. Build it with [Reject].
type RejectError struct {
	// Status is a 4xx status code. Any other (a literal's zero, a 2xx
	// that would tell the provider the event was taken, a 5xx that the
	// Handler keeps for transient failures) is answered as 422.
	Status int
	// Reason is sent as the response body, for the provider's delivery log.
	Reason string
}

// Reject returns a *RejectError: the delivery can never be accepted (it
// fails validation, cannot be normalized), so retrying it is pointless.
// A status outside 400..499 becomes 422. Jira Cloud retries 408, 409, 425
// and 429; use another 4xx for a final answer.
func Reject(status int, reason string) error {
	return &RejectError{Status: clampReject(status), Reason: reason}
}

// Error implements error.
func (e *RejectError) Error() string {
	return fmt.Sprintf("idempotency: rejected with %d: %s", clampReject(e.Status), e.Reason)
}

// clampReject is the status a rejection is answered with: status if it is
// a 4xx, else 422. A RejectError may be a literal, so the Handler clamps
// where it answers, not only in Reject.
func clampReject(status int) int {
	if status < 400 || status > 499 {
		return http.StatusUnprocessableEntity
	}
	return status
}

// Delivery is one verified webhook request, handed to the side effect.
// Header and Body belong to the Handler; a side effect must not modify them
// or keep them after it returns.
type Delivery struct {
	// Key is the idempotency key: the provider's delivery id. It is the
	// event id that downstream deduplication relies on, so a side effect
	// must carry it along (kafkapub puts it in a message header).
	Key string
	// Source names the provider, from Options.Source or Provider.Name
	// ("github", "jira").
	Source string
	// Event is the provider's event type ("pull_request",
	// "jira:issue_updated"), from Provider.EventHeader or EventField.
	Event string
	// HookID is the id of the webhook that sent the delivery, if the
	// provider says (GitHub's X-GitHub-Hook-ID).
	HookID string
	// Retry is the provider's retry count (Jira's
	// X-Atlassian-Webhook-Retry); 0 on a first attempt or when the
	// provider does not say.
	Retry int
	// Partition is the tenant the event belongs to (Provider.Partition):
	// kafkapub's default message key, so that one tenant's events stay on
	// one partition. Empty without a Provider.Partition.
	Partition string
	Header    http.Header
	// Body is the JSON payload, a valid JSON object: the request body, or
	// the decoded payload field of a form-encoded one.
	Body []byte
}

// KeyFunc returns the idempotency key of a request. It must return the same
// key for every retry of one delivery and different keys for different
// deliveries. An error or an empty key rejects the request with 400.
type KeyFunc func(h http.Header, body []byte) (string, error)

// HeaderKey returns a KeyFunc that reads the key from the named header.
func HeaderKey(name string) KeyFunc {
	return func(h http.Header, _ []byte) (string, error) {
		k := h.Get(name)
		if k == "" {
			return "", fmt.Errorf("%w: header %s is missing", ErrNoKey, name)
		}
		return k, nil
	}
}

// Verifier checks a request's signature over the raw body, returning an
// error wrapping ErrSignature when it is missing or wrong.
type Verifier func(h http.Header, body []byte) error

// HMACSHA256 returns a Verifier for signatures of the form "sha256=<hex>" in
// the named header: the HMAC-SHA256 of the body under secret, compared in
// constant time. GitHub sends it in X-Hub-Signature-256; Jira Cloud webhooks
// with a secret send the same form in X-Hub-Signature.
//
// The MACs are pooled: each keeps the secret's padded key state, so a
// request costs the body's hash and no allocation.
func HMACSHA256(header string, secret []byte) Verifier {
	secret = append([]byte(nil), secret...)
	pool := sync.Pool{New: func() any { return &macState{mac: hmac.New(sha256.New, secret)} }}
	return func(h http.Header, body []byte) error {
		got, ok := strings.CutPrefix(h.Get(header), "sha256=")
		if !ok {
			return fmt.Errorf("%w: header %s is missing or not sha256", ErrSignature, header)
		}
		var sig [sha256.Size]byte
		if !decodeHex(sig[:], got) {
			return fmt.Errorf("%w: header %s is not a hex SHA-256", ErrSignature, header)
		}
		m := pool.Get().(*macState)
		m.mac.Reset()
		m.mac.Write(body)
		equal := hmac.Equal(sig[:], m.mac.Sum(m.sum[:0]))
		pool.Put(m)
		if !equal {
			return fmt.Errorf("%w: mismatch", ErrSignature)
		}
		return nil
	}
}

// macState is a pooled MAC and the buffer of its sum.
type macState struct {
	mac hash.Hash
	sum [sha256.Size]byte
}

// decodeHex decodes s, upper- or lower-case hex, into dst, reporting
// whether s is exactly len(dst) bytes of it: hex.DecodeString's answer
// without its allocation.
func decodeHex(dst []byte, s string) bool {
	if len(s) != 2*len(dst) {
		return false
	}
	for i := range dst {
		hi, ok1 := fromHex(s[2*i])
		lo, ok2 := fromHex(s[2*i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

func fromHex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// GitHubSignature returns the Verifier of GitHub's X-Hub-Signature-256.
func GitHubSignature(secret []byte) Verifier {
	return HMACSHA256(HeaderGitHubSignature, secret)
}

// SignGitHub returns the X-Hub-Signature-256 value of body under secret:
// what GitHub sends. It is meant for tests and for clients of the gateway.
func SignGitHub(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// BodyFingerprint is the default fingerprint: the hex SHA-256 of the body.
func BodyFingerprint(d Delivery) string {
	sum := sha256.Sum256(d.Body)
	return hex.EncodeToString(sum[:])
}

// parser turns a request into a Delivery, or rejects it. It claims nothing.
type parser struct {
	maxBody  int64
	key      KeyFunc
	verify   Verifier
	source   string
	provider Provider
}

// parse reads and checks a request's header and body, size bytes long
// by its Content-Length (-1 unknown; a hint only). Rejections wrap
// ErrBodyTooLarge, ErrSignature, ErrMediaType, ErrNoKey or ErrMalformed; an error reading
// the body is returned as is.
func (p *parser) parse(h http.Header, body io.Reader, size int64) (Delivery, error) {
	b, err := readBody(body, size, p.maxBody+1)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return Delivery{}, fmt.Errorf("%w: over %d bytes", ErrBodyTooLarge, p.maxBody)
		}
		return Delivery{}, fmt.Errorf("idempotency: read body: %w", err)
	}
	if int64(len(b)) > p.maxBody {
		return Delivery{}, fmt.Errorf("%w: over %d bytes", ErrBodyTooLarge, p.maxBody)
	}
	// Authenticate before looking at anything else the sender controls.
	if p.verify != nil {
		if err := p.verify(h, b); err != nil {
			if !errors.Is(err, ErrSignature) {
				err = fmt.Errorf("%w: %w", ErrSignature, err)
			}
			return Delivery{}, err
		}
	}
	if err := p.provider.checkContentType(h); err != nil {
		return Delivery{}, err
	}
	key, err := p.key(h, b)
	if err != nil {
		if !errors.Is(err, ErrNoKey) {
			err = fmt.Errorf("%w: %w", ErrNoKey, err)
		}
		return Delivery{}, err
	}
	if key == "" || len(key) > MaxKeyBytes {
		return Delivery{}, fmt.Errorf("%w: key length %d not in [1, %d]", ErrNoKey, len(key), MaxKeyBytes)
	}
	// The signature covers the body as sent; what is published is the JSON
	// inside it.
	if b, err = p.provider.decodeBody(h, b); err != nil {
		return Delivery{}, err
	}
	if !isJSONObject(b) {
		return Delivery{}, fmt.Errorf("%w: not a JSON object", ErrMalformed)
	}
	// JSON is UTF-8 (RFC 8259), and encoding/json's grammar lets other
	// bytes through inside strings: a consumer that decodes strictly, or
	// ClickHouse, would fail on the record, or store U+FFFD instead.
	if !utf8.Valid(b) {
		return Delivery{}, fmt.Errorf("%w: payload is not valid UTF-8", ErrMalformed)
	}
	d := Delivery{Key: key, Source: p.source, Header: h, Body: b}
	if err := p.provider.metadata(h, &d); err != nil {
		return Delivery{}, err
	}
	return d, nil
}

// readBody reads body to its end or to limit bytes, whichever comes first,
// as io.ReadAll(io.LimitReader(body, limit)) does. A body whose size is
// known is read into one buffer of that size and a byte more (where its
// end is read), instead of the buffer io.ReadAll grows from 512 bytes,
// reallocating and copying a few times for a GitHub payload of 10 KB.
// Only up to maxPrealloc is taken on the sender's word: a client that
// announces megabytes and sends them slowly gets its buffer grown past that
// as they come.
func readBody(body io.Reader, size, limit int64) ([]byte, error) {
	const maxPrealloc = 64 << 10
	n := int64(512)
	if size >= 0 {
		n = min(size, maxPrealloc-1) + 1
	}
	b := make([]byte, 0, min(n, limit))
	for int64(len(b)) < limit {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // the body is longer than it said
		}
		m, err := body.Read(b[len(b):min(int64(cap(b)), limit)])
		b = b[:len(b)+m]
		if err == io.EOF {
			break
		}
		if err != nil {
			return b, err
		}
	}
	return b, nil
}

// isJSONObject reports whether b is one valid JSON object.
func isJSONObject(b []byte) bool {
	if !jsonscan.Valid(b) {
		return false
	}
	for _, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case '{':
			return true
		default:
			return false
		}
	}
	return false
}
