package kafkapub

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/segmentio/kafka-go"
)

// Header names set on every message.
const (
	// HeaderEventID carries Delivery.Key, the provider's delivery id: the
	// id downstream deduplication drops copies by.
	HeaderEventID = "event-id"
	// HeaderSource carries Delivery.Source.
	HeaderSource = "source"
	// HeaderEventType carries Delivery.Event, the provider's event type.
	HeaderEventType = "event-type"
	// HeaderHookID carries Delivery.HookID; absent when empty.
	HeaderHookID = "hook-id"
	// HeaderRetry carries Delivery.Retry in decimal; absent when 0.
	HeaderRetry = "retry"
)

// ErrNoMetadata is returned by ReadMetadata for a message without an
// event-id header or with a malformed one.
var ErrNoMetadata = errors.New("kafkapub: message has no delivery metadata")

// Metadata is the provider metadata Publish puts in a message's headers.
type Metadata struct {
	EventID   string // HeaderEventID: the delivery id, the dedup key
	Source    string // HeaderSource: "github", "jira"
	EventType string // HeaderEventType: "pull_request", "jira:issue_updated"
	HookID    string // HeaderHookID
	Retry     int    // HeaderRetry
}

// ReadMetadata reads the headers Publish wrote on m. It fails with
// ErrNoMetadata when m has no event-id header (it was not written by
// Publish) or a retry header that is not a number. When a header appears
// twice the last one wins, as in Kafka's own header lookups.
func ReadMetadata(m kafka.Message) (Metadata, error) {
	var md Metadata
	var retry string
	for _, h := range m.Headers {
		switch h.Key {
		case HeaderEventID:
			md.EventID = string(h.Value)
		case HeaderSource:
			md.Source = string(h.Value)
		case HeaderEventType:
			md.EventType = string(h.Value)
		case HeaderHookID:
			md.HookID = string(h.Value)
		case HeaderRetry:
			retry = string(h.Value)
		}
	}
	if md.EventID == "" {
		return Metadata{}, fmt.Errorf("%w: no %s header (partition %d, offset %d)", ErrNoMetadata, HeaderEventID, m.Partition, m.Offset)
	}
	if retry != "" {
		n, err := strconv.Atoi(retry)
		if err != nil || n < 0 {
			return Metadata{}, fmt.Errorf("%w: %s header %q (partition %d, offset %d)", ErrNoMetadata, HeaderRetry, retry, m.Partition, m.Offset)
		}
		md.Retry = n
	}
	return md, nil
}

// Headers returns the message headers of d's metadata, as Publish writes
// them: event id and source always, event type, hook id and retry when set.
// The values share one allocation, each capped at its own length so that
// appending to one cannot overwrite the next.
func Headers(d idempotency.Delivery) []kafka.Header {
	var retry []byte
	if d.Retry > 0 {
		retry = strconv.AppendInt(make([]byte, 0, 20), int64(d.Retry), 10)
	}
	buf := make([]byte, 0, len(d.Key)+len(d.Source)+len(d.Event)+len(d.HookID)+len(retry))
	value := func(b []byte) []byte {
		i := len(buf)
		buf = append(buf, b...)
		return buf[i:len(buf):len(buf)]
	}
	hs := make([]kafka.Header, 2, 5)
	hs[0] = kafka.Header{Key: HeaderEventID, Value: value([]byte(d.Key))}
	hs[1] = kafka.Header{Key: HeaderSource, Value: value([]byte(d.Source))}
	if d.Event != "" {
		hs = append(hs, kafka.Header{Key: HeaderEventType, Value: value([]byte(d.Event))})
	}
	if d.HookID != "" {
		hs = append(hs, kafka.Header{Key: HeaderHookID, Value: value([]byte(d.HookID))})
	}
	if retry != nil {
		hs = append(hs, kafka.Header{Key: HeaderRetry, Value: value(retry)})
	}
	return hs
}
