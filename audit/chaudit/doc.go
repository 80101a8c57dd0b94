// Package chaudit keeps package audit's counts in ClickHouse: the audit
// table's DDL, the sink that writes a Counter's rows exactly once (chsink,
// with its journal and insert tokens), the chain that folds a gateway's
// Deltas from the audit topic into the table, and the queries the verifier
// runs: the stages' totals per tenant and bucket, and the rows of a user's
// table counted per bucket.
//
// # The audit table
//
//	CREATE TABLE audit_counts (
//	    stage   LowCardinality(String),  -- audit.Stage…: gateway.accepted, processor.read, ...
//	    tenant  String,
//	    bucket  DateTime64(3, 'UTC'),    -- start of the event-time bucket
//	    counter LowCardinality(String),  -- who counted: a chain's topic/partition
//	    count   UInt64,                  -- that counter's running total: only grows
//	    written DateTime64(3, 'UTC') DEFAULT now64(3)
//	) ENGINE = ReplacingMergeTree(count)
//	ORDER BY (tenant, bucket, stage, counter)
//	SETTINGS non_replicated_deduplication_window = 10000
//
// One row per (stage, tenant, bucket, counter) survives a merge, the one
// with the largest count; a query takes max(count) per key, so it needs no
// FINAL. The stages side by side, per tenant and bucket, in one query
// (ComparisonQuery):
//
//	SELECT tenant, bucket,
//	       sumIf(c, stage = 'gateway.accepted')     AS accepted,
//	       sumIf(c, stage = 'processor.read')       AS read,
//	       sumIf(c, stage = 'processor.first_seen') AS first_seen
//	FROM (SELECT stage, tenant, bucket, counter, max(count) AS c
//	      FROM audit_counts GROUP BY stage, tenant, bucket, counter)
//	GROUP BY tenant, bucket ORDER BY tenant, bucket
//
// chsink.ReadServerSettings reads the ClickHouse version and the
// deduplication settings the sinks depend on; exactlyonce audit prints
// them above its table and under "clickhouse" in its JSON.
//
// # Errors
//
// Match them with errors.Is:
//
//   - [ErrSchema] is wrapped by the error of a query on a table that lacks
//     the columns it needs (not the audit table, or a column name mistyped).
//
// # Guarantees
//
//   - A Counter's rows reach the table through chsink: flushed at every
//     checkpoint, replayed from the journal with their insert tokens, so
//     the newest count of every key is in the table once its checkpoint
//     completed. Rows written again are the same counts (or, after a
//     restore, counts on their way to the same total): ReplacingMergeTree
//     keeps the largest.
//   - Folder folds every Delta of the audit topic once: dedup by the
//     delta's source and sequence number, inside the checkpoint, so a delta
//     the gateway sent twice or the chain replays counts once.
//   - Totals and TableCounts refuse a table that lacks the audit schema or
//     the named columns with an error wrapping ErrSchema, and report an
//     unreachable server as such.
package chaudit
