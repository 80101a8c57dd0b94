// Package kafkaaudit sends a gateway's audit counts to the audit topic:
// Publisher sums what the gateway accepted per stage, tenant and bucket and
// sends the sums every Options.Interval as audit.Deltas, keyed by tenant,
// which the processor folds into the audit table (audit/chaudit.Folder).
//
//	pub, _ := kafkaaudit.New(brokers, "webhooks_audit", kafkaaudit.Options{})
//	go pub.Run(ctx)
//	defer pub.Close()
//	publish = pub.Wrap(publish, func(d idempotency.Delivery) (string, time.Time, bool) { ... })
//
// # Guarantees
//
//   - A delta is numbered before its first send and keeps its number until
//     the broker acknowledged it (acks=all); a send that failed or whose
//     answer was lost is sent again with the same number, and the folder
//     counts it once. Deltas are never dropped while the process lives. The
//     folder deduplicates per partition of the audit topic: a delta sent
//     again lands where it did because it keeps its key (its tenant, hashed);
//     do not add partitions to the audit topic while gateways run.
//   - Counts are at most what the gateway published: a gateway killed before
//     it sent its last deltas loses them (up to one Interval of counts, and
//     any unsent after failures), which can hide a loss in the audit but
//     never show one that did not happen. Close sends what is left.
package kafkaaudit
