package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/exactlyonce/exactlyonce/audit/kafkaaudit"
	"github.com/exactlyonce/exactlyonce/examples/devmetrics"
	"github.com/exactlyonce/exactlyonce/idempotency"
)

// auditFlags: -audit-topic sends the deliveries the gateway accepted,
// counted per tenant and minute of event time, to the audit topic, which
// the processor (-audit-topic) folds into the audit table
// (cmd/exactlyonce audit compares them with what Kafka holds).
type auditFlags struct {
	topic, stage string
}

func (a *auditFlags) register(s *settings) {
	s.String(&a.topic, "audit-topic", "KAFKA_AUDIT_TOPIC", "", "send the accepted deliveries' counts per tenant and minute to this topic, for the processor's -audit-topic")
	s.String(&a.stage, "audit-stage", "GATEWAY_AUDIT_STAGE", "", "count under this stage instead of gateway.accepted (a second gateway beside the first)")
}

// withAudit wraps publish to count every delivery whose publish succeeded,
// and returns the function that sends what is left at shutdown.
func withAudit(ctx context.Context, cfg config, publish idempotency.Func, log *slog.Logger) (idempotency.Func, func(), error) {
	if cfg.audit.topic == "" {
		return publish, func() {}, nil
	}
	transport, err := cfg.kafka.transport()
	if err != nil {
		return nil, nil, err
	}
	pub, err := kafkaaudit.New(cfg.brokers, cfg.audit.topic, kafkaaudit.Options{Transport: transport, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	classify := devmetrics.Classify
	if cfg.pipeline != "devmetrics" {
		// The tenant-minute chain's event time is the record's timestamp,
		// set when the publish is sent: the time of the count.
		classify = func(d idempotency.Delivery) (string, time.Time, bool) { return d.Partition, time.Now(), true }
	}
	wrapped := pub.Wrap(publish, classify)
	if cfg.audit.stage != "" {
		wrapped = func(ctx context.Context, d idempotency.Delivery) error {
			if err := publish(ctx, d); err != nil {
				return err
			}
			if tenant, at, ok := classify(d); ok {
				pub.Add(cfg.audit.stage, tenant, at, 1)
			}
			return nil
		}
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = pub.Run(ctx) }()
	return wrapped, func() {
		if err := pub.Close(); err != nil {
			log.Warn("audit counts not sent at shutdown", "err", err)
		}
		<-done
	}, nil
}
