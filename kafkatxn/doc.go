// Package kafkatxn is Kafka's own exactly-once layer (KIP-98, KIP-360) on
// segmentio/kafka-go's protocol layer: an idempotent producer and a
// read_committed reader that skips aborted transactions. kafka-go has
// neither: its Writer sends producer id -1 (no idempotence), and its
// ReadCommitted isolation stops at the last stable offset but hands out the
// records of aborted transactions and never says which they are.
//
// # Tour
//
// Producer writes batches that carry a producer id, an epoch and the
// sequence number of their first record in the partition:
//
//	p, err := kafkatxn.NewProducer(ctx, brokers, kafkatxn.ProducerOptions{})
//	defer p.Close()
//	off, err := p.Produce(ctx, "events", 3, kafkatxn.Record{Key: k, Value: v})
//
// Reader reads one partition with isolation read_committed and filters it
// as the Java consumer does, with the fetch response's aborted-transactions
// list and the control batches:
//
//	r, err := kafkatxn.NewReader(brokers, "events", 3, offset, kafkatxn.ReaderOptions{})
//	defer r.Close()
//	msgs, err := r.Fetch(ctx) // committed records only
//
// # How the producer handles the protocol's errors
//
// One batch per partition is in flight at a time. A broken connection, a
// timeout or a retriable broker error is retried with the same batch, same
// sequence number: a broker that wrote it already answers with the original
// offset (or DUPLICATE_SEQUENCE_NUMBER) instead of writing it again.
// OUT_OF_ORDER_SEQUENCE_NUMBER and UNKNOWN_PRODUCER_ID (the broker lost or
// expired the producer's state) and INVALID_PRODUCER_EPOCH / PRODUCER_FENCED
// bump the epoch as the Java client does since KIP-360 (InitProducerID with
// the current id and epoch, or a new id where that is refused), restart the
// sequences at 0 and send the batch again: the broker did not write it. When
// the delivery timeout runs out with an attempt of unknown outcome, the
// epoch is bumped too, so the next batch does not depend on it.
//
// Before it re-sends a batch whose earlier attempt got no answer, the
// producer looks for the batch in the partition (by producer id, epoch and
// base sequence, from the end of its previous acknowledged batch): a broker
// that restarted after a kill -9 may have lost its sequence windows (kfake
// does; Kafka rebuilds them from the log), and then would accept the copy.
//
// # Guarantees
//
//   - A Produce that returns nil wrote its records once, with acks=all,
//     however many attempts it took, including after lost acknowledgements
//     and broker restarts.
//   - An error wrapping ErrOutcomeUnknown may have written the records (at
//     most once); any other Produce error wrote nothing.
//   - Records of one partition are written in Produce order.
//   - Reader hands out every committed record (and every record written
//     without a transaction) once, in offset order, and no record of an
//     aborted transaction and no control record. It reads up to the last
//     stable offset only, so an open transaction holds it back.
//
// What it assumes: the broker enforces idempotence (Kafka 0.11+, enabled
// by default since 3.0); the same producer id is never used by two
// Producers (each NewProducer gets its own).
package kafkatxn
