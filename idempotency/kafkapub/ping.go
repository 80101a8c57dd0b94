package kafkapub

import (
	"context"
	"errors"
	"fmt"

	"github.com/segmentio/kafka-go"
)

// Ping reports whether the publisher can publish now: a fresh connection to
// a broker answers a metadata request for the topic, and every partition
// has a leader. It does not reuse the writer's connections, so a broker
// that stopped answering (paused, partitioned away) fails it within ctx.
// A readiness probe calls it.
func (p *Publisher) Ping(ctx context.Context) error {
	return ping(ctx, p.brokers, p.transport, p.topic)
}

// Ping is Publisher.Ping.
func (p *IdempotentPublisher) Ping(ctx context.Context) error {
	return ping(ctx, p.brokers, p.transport, p.topic)
}

func ping(ctx context.Context, brokers []string, transport *kafka.Transport, topic string) error {
	d := &kafka.Dialer{TLS: transport.TLS, SASLMechanism: transport.SASL}
	var errs []error
	for _, b := range brokers {
		err := pingBroker(ctx, d, b, topic)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("kafkapub: no broker answers for %s: %w", topic, errors.Join(errs...))
}

func pingBroker(ctx context.Context, d *kafka.Dialer, broker, topic string) error {
	c, err := d.DialContext(ctx, "tcp", broker)
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	parts, err := c.ReadPartitions(topic)
	if err != nil {
		return fmt.Errorf("%s: %w", broker, err)
	}
	if len(parts) == 0 {
		return fmt.Errorf("%s: topic %s has no partitions", broker, topic)
	}
	for _, pt := range parts {
		if pt.Error != nil {
			return fmt.Errorf("%s: partition %d: %w", broker, pt.ID, pt.Error)
		}
		if pt.Leader.Host == "" {
			return fmt.Errorf("%s: partition %d has no leader", broker, pt.ID)
		}
	}
	return nil
}
