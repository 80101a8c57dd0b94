package kafkapub

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/idempotency"
)

// Defaults of the size limits.
const (
	// DefaultMaxMessageBytes is the limit assumed when the topic's
	// max.message.bytes cannot be read: Kafka's default (1 MB and 12
	// bytes of batch overhead).
	DefaultMaxMessageBytes = 1048588
	// DefaultCompression compresses every batch with lz4: 4.3 times
	// smaller on GitHub's example payloads at about 100 MB/s of one core
	// (docs/bench/history.md, "Compression"), cheap enough for every webhook.
	DefaultCompression = "lz4"
	// DefaultLargeCompression compresses, one record per batch, a delivery
	// too large for the topic uncompressed: there the ratio decides
	// whether the event fits at all, and zstd's is the best of the three
	// codecs measured (6.1 on the examples, far more on large pushes).
	DefaultLargeCompression = "zstd"
)

// Header names of a claim-check record: a delivery too large for the topic
// whose payload went to Options.Payloads.
const (
	// HeaderClaimCheck names the object holding the payload: the
	// delivery's source and key, "github/<X-GitHub-Delivery>".
	HeaderClaimCheck = "claim-check"
	// HeaderClaimCheckSHA256 is the hex SHA-256 of the payload, which
	// Payload checks on the object it reads.
	HeaderClaimCheckSHA256 = "claim-check-sha256"
)

// ErrClaimCheck is wrapped by Payload's errors for a claim-check record whose
// object is missing or does not match its digest.
var ErrClaimCheck = errors.New("kafkapub: claim check")

// PayloadStore keeps the payloads too large for a Kafka record (the claim
// check pattern): the record carries the object's name, the consumer reads
// the object back with Payload. checkpoint.Storage has these two methods, so
// s3storage.Storage (S3), checkpoint.FSStorage and checkpoint.MemoryStorage are
// PayloadStores.
//
// Put must be durable when it returns nil, and overwriting a name with the
// same data must be harmless: a retried delivery puts its payload again
// under the same name. Get returns what the last Put stored.
type PayloadStore interface {
	Put(ctx context.Context, name string, data []byte) error
	Get(ctx context.Context, name string) ([]byte, error)
}

// ClaimCheckName is the name under which a delivery's payload is stored:
// its source and idempotency key, so every retry of one delivery writes
// the same object.
func ClaimCheckName(d idempotency.Delivery) string { return d.Source + "/" + d.Key }

// Payload returns the payload of a record Publish wrote: its value, or for
// a claim-check record the object it names, read from store and checked
// against the record's digest. store may be nil when the publisher has no
// Options.Payloads; a claim-check record then fails with ErrClaimCheck.
func Payload(ctx context.Context, store PayloadStore, m kafka.Message) ([]byte, error) {
	var name, sum string
	for _, h := range m.Headers {
		switch h.Key {
		case HeaderClaimCheck:
			name = string(h.Value)
		case HeaderClaimCheckSHA256:
			sum = string(h.Value)
		}
	}
	if name == "" {
		return m.Value, nil
	}
	if store == nil {
		return nil, fmt.Errorf("%w: record at partition %d offset %d refers to %q, and no payload store is configured", ErrClaimCheck, m.Partition, m.Offset, name)
	}
	b, err := store.Get(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("%w: payload %q of partition %d offset %d: %w", ErrClaimCheck, name, m.Partition, m.Offset, err)
	}
	got := sha256.Sum256(b)
	if hex.EncodeToString(got[:]) != sum {
		return nil, fmt.Errorf("%w: payload %q of partition %d offset %d does not match its digest", ErrClaimCheck, name, m.Partition, m.Offset)
	}
	return b, nil
}

// codec returns kafka-go's compression of a Kafka compression.type name.
func codec(name string) (kafka.Compression, error) {
	switch name {
	case "none":
		return 0, nil
	case "gzip":
		return kafka.Gzip, nil
	case "snappy":
		return kafka.Snappy, nil
	case "lz4":
		return kafka.Lz4, nil
	case "zstd":
		return kafka.Zstd, nil
	}
	return 0, fmt.Errorf("%w: compression %q: want none, gzip, snappy, lz4 or zstd", ErrInvalidOptions, name)
}

// limits decides how a delivery goes to Kafka: as a record of the shared
// batches, alone in a compressed batch, through the claim check, or not at
// all (413).
type limits struct {
	topic string
	// maxMessage is the topic's max.message.bytes: the largest record
	// batch the broker accepts, compressed.
	maxMessage int
	// batchBytes is the writer's BatchBytes: kafka-go adds records to a
	// batch while their uncompressed size stays within it. It leaves room
	// under maxMessage for the batch's and records' own headers, so a
	// batch the writer makes always fits.
	batchBytes int
	large      kafka.Compression // of a record alone in its batch
	payloads   PayloadStore
}

func newLimits(topic string, maxMessage int, large kafka.Compression, payloads PayloadStore) limits {
	return limits{topic: topic, maxMessage: maxMessage, batchBytes: maxMessage - maxMessage/32 - 512, large: large, payloads: payloads}
}

// route is how one record goes.
type route int

const (
	routeBatch route = iota // shared batches
	routeAlone              // alone in a batch compressed with limits.large
)

// recordBytes is kafka-go's measure of a message against BatchBytes.
func recordBytes(m kafka.Message) int {
	n := len(m.Key) + len(m.Value) + 34 // kafka-go's per-message framing
	for _, h := range m.Headers {
		n += 2 + len(h.Key) + 4 + len(h.Value)
	}
	return n
}

// place returns how msg goes, or the claim-check record that replaces it
// (its payload stored first), or a *idempotency.RejectError (413) for a
// delivery that cannot go at all. compress tells whether the writer can
// compress (the idempotent producer cannot).
func (l limits) place(ctx context.Context, d idempotency.Delivery, msg kafka.Message, compress bool) (kafka.Message, route, error) {
	size := recordBytes(msg)
	if size <= l.batchBytes {
		return msg, routeBatch, nil
	}
	compressed := -1
	if compress && l.large != 0 {
		compressed = compressedBytes(l.large, msg)
		if compressed <= l.batchBytes {
			return msg, routeAlone, nil
		}
	}
	if l.payloads != nil {
		cc, err := l.claimCheck(ctx, d, msg)
		return cc, routeBatch, err
	}
	return msg, routeBatch, l.tooLarge(d, size, compressed, nil)
}

// tooLarge is the 413 of a delivery that cannot go. refused is the broker's
// refusal, when it is the broker that said so (nil when the size did).
func (l limits) tooLarge(d idempotency.Delivery, size, compressed int, refused error) error {
	how := ""
	if compressed >= 0 {
		how = ", " + strconv.Itoa(compressed) + " compressed with " + compressionName(l.large)
	}
	by := fmt.Sprintf("does not fit in a record of topic %s (max.message.bytes %d)", l.topic, l.maxMessage)
	if refused != nil {
		by = fmt.Sprintf("was refused as too large by topic %s (%v)", l.topic, refused)
	}
	rej := idempotency.Reject(http.StatusRequestEntityTooLarge,
		fmt.Sprintf("payload of %d bytes (a record of %d%s) %s; the gateway stores no such payloads", len(d.Body), size, how, by))
	if refused != nil {
		return fmt.Errorf("kafkapub: publish %q: %w: %w", d.Key, rej, refused)
	}
	return fmt.Errorf("kafkapub: publish %q: %w", d.Key, rej)
}

// claimCheck stores d's payload under ClaimCheckName(d) and returns the
// record that refers to it in place of msg.
func (l limits) claimCheck(ctx context.Context, d idempotency.Delivery, msg kafka.Message) (kafka.Message, error) {
	name := ClaimCheckName(d)
	if err := l.payloads.Put(ctx, name, msg.Value); err != nil {
		return msg, fmt.Errorf("kafkapub: store the payload of %q: %w", d.Key, err)
	}
	sum := sha256.Sum256(msg.Value)
	msg.Value = []byte{} // not nil: a null value is a tombstone to a compacted topic
	msg.Headers = append(msg.Headers[:len(msg.Headers):len(msg.Headers)],
		kafka.Header{Key: HeaderClaimCheck, Value: []byte(name)},
		kafka.Header{Key: HeaderClaimCheckSHA256, Value: []byte(hex.EncodeToString(sum[:]))})
	return msg, nil
}

// compressedBytes is msg's size once compressed alone with c: what the
// broker measures against max.message.bytes, to within the framing.
func compressedBytes(c kafka.Compression, msg kafka.Message) int {
	var buf bytes.Buffer
	w := c.Codec().NewWriter(&buf)
	_, err := w.Write(msg.Value)
	if err == nil {
		err = w.Close()
	}
	if err != nil {
		return recordBytes(msg)
	}
	return recordBytes(msg) - len(msg.Value) + buf.Len()
}

func compressionName(c kafka.Compression) string {
	if c == 0 {
		return "none"
	}
	return c.Codec().Name()
}

// maxMessageBytes reads the topic's max.message.bytes.
func maxMessageBytes(ctx context.Context, c *kafka.Client, topic string) (int, error) {
	dc, err := c.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{
		Resources: []kafka.DescribeConfigRequestResource{{
			ResourceType: kafka.ResourceTypeTopic,
			ResourceName: topic,
			ConfigNames:  []string{"max.message.bytes"},
		}},
	})
	if err != nil {
		return 0, fmt.Errorf("kafkapub: describe configs of %s: %w", topic, err)
	}
	for _, r := range dc.Resources {
		if r.Error != nil {
			return 0, fmt.Errorf("kafkapub: describe configs of %s: %w", topic, r.Error)
		}
		for _, e := range r.ConfigEntries {
			if e.ConfigName == "max.message.bytes" {
				n, err := strconv.Atoi(e.ConfigValue)
				if err != nil || n <= 0 {
					return 0, fmt.Errorf("kafkapub: max.message.bytes of %s is %q", topic, e.ConfigValue)
				}
				return n, nil
			}
		}
	}
	return 0, fmt.Errorf("kafkapub: topic %s reports no max.message.bytes", topic)
}
