package main

import (
	"context"
	"errors"

	"github.com/ClickHouse/ch-go"

	"github.com/exactlyonce/exactlyonce/audit/chaudit"
	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
)

// The audit (package audit, cmd/exactlyonce audit): -audit counts the
// devmetrics chain's records per stage, organisation and minute into the
// audit table; -audit-topic also reads the gateways' counts from their
// audit topic, in the same consumer group, and folds them in.

func checkAudit(c config) error {
	if c.audit && c.pipeline != "devmetrics" {
		return errors.New("-audit: only the devmetrics chain counts its stages")
	}
	return nil
}

// auditTopics returns the topics the group reads.
func auditTopics(c config) []string {
	if c.auditTopic == "" {
		return []string{c.topic}
	}
	return []string{c.topic, c.auditTopic}
}

// withAudit creates the audit table if asked and returns the chain that
// runs the folder on the audit topic's partitions and chain on the others.
func withAudit(ctx context.Context, c config, opts ch.Options, db chsink.DB, sinkOpts chsink.Options, chain kafkasource.BuildChain) (kafkasource.BuildChain, error) {
	if !c.audit && c.auditTopic == "" {
		return chain, nil
	}
	if c.createTables {
		if err := chaudit.CreateTable(ctx, opts, c.database, chaudit.DefaultTable); err != nil {
			return nil, err
		}
	}
	if c.auditTopic == "" {
		return chain, nil
	}
	folder := chaudit.Folder(chaudit.FolderOptions{ClickHouse: db, Sink: sinkOpts})
	return func(ctx context.Context, parts *checkpoint.Chain) (*kafkasource.Processor, error) {
		if parts.Partition().Topic == c.auditTopic {
			return folder(ctx, parts)
		}
		return chain(ctx, parts)
	}, nil
}
