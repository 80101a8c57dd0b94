package devmetrics

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/idempotency/kafkapub"
)

// Check is the gateway's idempotency.Options.Check: it normalizes a
// verified delivery before the gateway claims or publishes anything. An
// activity the metrics do not count (a ping, a pull request opened) is
// answered 200 and not published (idempotency.ErrIgnored); a payload that
// cannot be normalized is answered 422 with the reason, which the provider
// shows in its delivery log, and not published. The processor normalizes
// the published payload again (Decode).
func Check(_ context.Context, d idempotency.Delivery) error {
	_, err := Normalize(d.Source, d.Event, d.Key, d.Body)
	var nerr *NormalizeError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrNotCounted):
		return fmt.Errorf("%w: %v", idempotency.ErrIgnored, err)
	case errors.As(err, &nerr):
		return idempotency.Reject(http.StatusUnprocessableEntity, nerr.Error())
	default:
		return err
	}
}

// PartitionKey is the gateway's kafkapub.Options.PartitionKey: the
// organisation of the normalized event (GitHub organization or repository
// owner, Jira site). One organisation's events go to one partition, so each
// per-employee window (keyed by organisation and employee, WindowKey) lives
// whole in one partition's chain. kafkapub's default, the provider's
// tenant, would split a Jira site's employees over partitions by project.
// Check runs first, so only normalizable deliveries reach it.
func PartitionKey(d idempotency.Delivery) ([]byte, error) {
	ev, err := Normalize(d.Source, d.Event, d.Key, d.Body)
	if err != nil {
		return nil, err
	}
	return []byte(ev.OrgID), nil
}

// Decode normalizes a Kafka record the gateway published: the provider's
// payload as value, the delivery's metadata in headers (kafkapub). It
// returns an error wrapping ErrNotCounted for a valid event the metrics do
// not count, and any other error for a record that can never be normalized
// (a poison record).
func Decode(m kafka.Message) (Event, error) {
	md, err := kafkapub.ReadMetadata(m)
	if err != nil {
		return Event{}, err
	}
	ev, err := Normalize(md.Source, md.EventType, md.EventID, m.Value)
	if err != nil {
		return Event{}, fmt.Errorf("offset %d: %w", m.Offset, err)
	}
	return ev, nil
}
