// Package kafkapub publishes webhook deliveries to Kafka with kafka-go, as
// the side effect of an idempotency.Handler:
//
//	pub, err := kafkapub.New(ctx, brokers, "webhooks", kafkapub.Options{Logger: logger})
//	defer pub.Close()
//	h, err := idempotency.NewHandler(store, pub.Publish, idempotency.Options{
//		Provider: idempotency.GitHub(),
//		Secret:   secret,
//	})
//
// Each message carries the provider's metadata as headers (event-id,
// source, event-type, hook-id, retry); a consumer reads them with
// ReadMetadata instead of looking headers up by hand. Its key is the
// delivery's tenant (Delivery.Partition: the GitHub organization or owner,
// the Jira site and project), so one tenant's events share a partition.
//
// The writer is configured so that "returned nil" means "durable": acks=all
// set explicitly (kafka-go's zero value is acks=none, which reports no
// errors at all), synchronous writes, and a BatchTimeout of a few
// milliseconds instead of kafka-go's 1 s, which would make every webhook wait
// a second (GitHub gives up on an answer after 10 s). Messages are keyed by
// Options.PartitionKey, so all events of one entity land on one partition in
// publish order. Window aggregates are kept per partition: a window's key
// must be a function of the partition key's fields, or its events spread
// over partitions and each writes a partial row.
//
// At start-up New and NewIdempotent read the topic's min.insync.replicas
// and replication factor and warn through the logger when acks=all is
// weaker than it sounds (min.insync.replicas 1 is acks=1 in disguise). Both
// publishers report the same metrics (exactlyonce.kafkapub.messages by
// result ok, failed or unknown, and exactlyonce.kafkapub.publish.duration)
// through Options.MeterProvider.
//
// # Large payloads
//
// GitHub sends payloads up to 25 MB; a topic takes record batches up to its
// max.message.bytes (Kafka's default is about 1 MB), which New and
// NewIdempotent read at start-up and log beside the writer's limit. Batches
// are compressed (Options.Compression, default lz4). A delivery too large
// for the shared batches uncompressed goes alone in a batch compressed with
// Options.LargeCompression (zstd); one that does not fit even so goes
// through the claim check when Options.Payloads is set (its payload stored
// under ClaimCheckName, the delivery's source and key, before the record
// that refers to it; consumers read it back with Payload, which checks its
// digest), and is refused otherwise with idempotency.Reject(413, reason),
// which the Handler answers as a permanent failure, never 503. The
// idempotent producer writes uncompressed batches: for it only the claim
// check or the 413 remain above the limit.
//
// Ping tells a readiness probe whether a broker answers for the topic now.
//
// Options.Transport carries kafka-go's TLS and SASL (PLAIN, SCRAM-SHA-256,
// SCRAM-SHA-512) for a managed Kafka.
//
// # Errors
//
// Match them with errors.Is:
//
//   - [ErrClaimCheck] is wrapped by Payload's errors for a claim-check
//     record whose object is missing or does not match its digest.
//   - [ErrInvalidOptions] is wrapped by the error New returns for an
//     unusable configuration.
//   - [ErrNoMetadata] is returned by ReadMetadata for a message without an
//     event-id header or with a malformed one.
//
// # Guarantees
//
//   - Publish returns nil only after every in-sync replica acknowledged the
//     message, so a 2xx from the Handler means the event is in Kafka.
//   - IdempotentPublisher (NewIdempotent) writes through kafkatxn's
//     idempotent producer: a retry after a lost acknowledgement is dropped
//     by the broker, so a Publish that returns nil wrote its message once.
//     A Publish whose batch went unanswered (a broker that stopped
//     answering) returns only once a broker answered the same batch sent
//     again with its sequence number: nil if it was written, a definite
//     error if not, never an unknown outcome (but after Close). Behind the
//     Handler, which answers 503 at its deadline and holds the key until
//     Publish returns, a redelivery of such a delivery replays the 202 or
//     writes it once: with the broker stopped (SIGSTOP) for 8 s with 16
//     deliveries in flight and every 503 redelivered until 202, each was
//     in Kafka exactly once.
//   - Publisher, for brokers with idempotence disabled, is at least once:
//     kafka-go has no idempotent producer.
//     Its retries after a lost acknowledgement, and a Publish whose context
//     ends while the batch is in flight, can write a message twice, even when
//     Publish returned an error (IsOutcomeUnknown, and such errors wrap
//     idempotency.ErrOutcomeUnknown, so the Handler holds the key until
//     its PendingTTL rather than release it). In the same pause test the
//     redeliveries wrote 6 duplicate records for 16 deliveries.
//     Each message carries the
//     delivery id in its event-id header; the downstream deduplicator drops
//     copies by that id. The pipeline is exactly-once only with it.
//   - After Options.ResetAfter Publishes in a row end with an unknown
//     outcome or a stale-metadata refusal, Publisher replaces its kafka-go
//     Writers and Transport with fresh ones (logged, and counted in
//     exactlyonce.kafkapub.writer.resets): kafka-go's cached connections and
//     metadata do not always recover from leader elections and broker
//     restarts. A reset changes no outcome: a Publish that failed with an
//     unknown outcome stays failed (the Handler answers 503, the provider
//     redelivers, the dedup drops a copy), and batches the old writer still
//     queued fail unsent.
//   - A claim-check record is written only after its payload is stored, and
//     the object's name is the delivery's idempotency key: retries of one
//     delivery write the same object again, never a second one, and every
//     copy of the record reads the payload back.
//   - A delivery refused with 413 wrote nothing to Kafka.
//   - Per-key order holds for messages published one after another; two
//     concurrent Publishes of one key may land in either order.
package kafkapub
