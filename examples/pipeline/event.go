package main

import (
	"fmt"

	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/idempotency/kafkapub"
)

// decode normalizes a Kafka record the gateway published: the provider's
// payload as value, the delivery's metadata in headers. It returns an error
// wrapping errNotCounted for a valid event the metrics do not count, and
// any other error for a record that can never be normalized (a poison
// record).
func decode(m kafka.Message) (Event, error) {
	md, err := kafkapub.ReadMetadata(m)
	if err != nil {
		return Event{}, err
	}
	ev, err := normalize(md.Source, md.EventType, md.EventID, m.Value)
	if err != nil {
		return Event{}, fmt.Errorf("offset %d: %w", m.Offset, err)
	}
	return ev, nil
}
