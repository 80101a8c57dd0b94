// Package kafkatxn is Kafka's own exactly-once layer (KIP-98, KIP-360) on
// segmentio/kafka-go's protocol layer: an idempotent producer, a
// transactional producer, and a read_committed reader that skips aborted
// transactions. kafka-go has
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
// TxProducer writes transactions for one transactional id; starting it
// fences every earlier producer of the id:
//
//	tp, err := kafkatxn.NewTxProducer(ctx, brokers, "sink-events-3", kafkatxn.TxOptions{})
//	_, err = tp.Produce(ctx, "out", 0, recs...) // inside the open transaction
//	txn := tp.Txn()                              // what a checkpoint records
//	err = tp.Commit(ctx)                         // or Abort
//
// CommitPrepared commits a recorded Txn after a crash (the restore step of
// a two-phase commit), or says ErrAborted when it can no longer be.
//
// Reader reads one partition with isolation read_committed and filters it
// as the Java consumer does, with the fetch response's aborted-transactions
// list and the control batches:
//
//	r, err := kafkatxn.NewReader(brokers, "events", 3, offset, kafkatxn.ReaderOptions{})
//	defer r.Close()
//	msgs, err := r.Fetch(ctx) // committed records only
//
// A transaction left open by a producer that died pins the last stable
// offset of its partitions until its timeout: ListTransactions and
// DescribeTransactions find it, and AbortTransaction aborts it as a new
// producer of the id would (exactlyonce txn is the command line of them).
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
// # Transactions
//
// A TxProducer runs transactions v2 (KIP-890 part 2) where the broker
// offers them, and v1 elsewhere: NewTxProducer asks a broker (ApiVersions
// v3) for its finalized transaction.version feature, and runs v2 when it
// is 2 or more and the broker speaks EndTxn v5, Produce v12 and
// TxnOffsetCommit v5 (Apache Kafka 4.x clusters created at 4.0 or later,
// or upgraded with kafka-features.sh), v1 otherwise (Kafka 3.x, and 4.x
// with transaction.version 1). TxProducer.TransactionVersion says which;
// TxOptions.TransactionsV1 keeps v1 on a v2 broker; TxOptions.Logger logs
// it. A running TxProducer follows a change of the level (kafka-features.sh
// upgrade or downgrade) at the start of a transaction, never inside one,
// as the Java client 4.x does: Java re-reads the features its connections'
// ApiVersions answers carried at each transaction boundary; kafka-go keeps
// those answers to itself, so TxProducer asks again (one ApiVersions) when
// its last reading is 30 seconds old, which keeps the round trip off
// nearly every transaction. With v2, as the Java client 4.x does, a partition joins the
// transaction with its first Produce (v12: the leader asks the
// coordinator) and a group with TxnOffsetCommit v5, with no
// AddPartitionsToTxn or AddOffsetsToTxn; EndTxn v5 ends the transaction,
// the coordinator bumps the epoch and writes the markers with the bumped
// one, and answers with the producer id and epoch of the next
// transaction. With v1 the producer adds partitions and groups itself and
// after EndTxn bumps the epoch (InitProducerID with its id and epoch,
// KIP-360), as v2 brokers do by themselves.
//
// Either way every transaction of a TxProducer has its own epoch, so
// (producer id, epoch) names one transaction, and committing a recorded
// transaction again can never commit a later one. CommitPrepared sends
// EndTxn(commit) with the recorded epoch, in the protocol the transaction
// ran (Txn.Version): Kafka answers success while the transaction is open
// or just committed (v2: the coordinator takes the epoch one below its own
// as a retry of the commit that bumped it); once the id's next
// transaction has begun or the transaction was aborted, the transaction
// marker after the transaction's first record tells commit from abort (a
// marker of the producer id with the recorded epoch or a later one: v2
// writes it with the bumped epoch).
//
// The errors of KIP-890 and KIP-1050 are mapped once: CONCURRENT_TRANSACTIONS
// and the coordinator's moves are retried (a Produce of v2 meets the
// previous transaction's markers being written, as the next request of v1
// does); TRANSACTION_ABORTABLE, and a sequence or state the broker does not
// know, make the transaction abortable (ErrAbortable); PRODUCER_FENCED and
// INVALID_PRODUCER_EPOCH are fatal (ErrFenced, or ErrTimedOut). A Commit
// or Abort whose EndTxn went unanswered until DeliveryTimeout wraps
// ErrOutcomeUnknown: the transaction may have ended so; calling it again
// is safe (v2 and v1 coordinators answer a repeated EndTxn with success). kafka-go looks up the transaction coordinator
// (FindCoordinator, key type transaction) before every transactional
// request, so NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
// COORDINATOR_LOAD_IN_PROGRESS and CONCURRENT_TRANSACTIONS are retried with
// backoff until DeliveryTimeout and reach the new coordinator. Produce
// retries a batch with the same sequence number, as Producer does.
// PRODUCER_FENCED and INVALID_PRODUCER_EPOCH become ErrFenced, final and
// without the broker's (retriable-looking) error code in the chain, unless
// the open transaction was TransactionTimeout old or older: the broker
// answers so after it aborted the transaction by its timeout too (it
// bumps the epoch), and the error then wraps ErrTimedOut instead, which
// IsFenced does not match. Txn.Expires tells a two-phase-commit sink how
// long its prepared transaction may wait for its commit, and
// MaxTransactionTimeout reads the brokers' transaction.max.timeout.ms
// (DescribeConfigs), which caps TransactionTimeout.
//
// # Errors
//
// Match them with errors.Is (the sentinels) or errors.As (the types):
//
//   - [ErrInvalidOptions] is wrapped by the error of a constructor
//     (NewProducer, NewTxProducer, NewReader, and CommitPrepared's client)
//     whose required arguments are missing or whose options cannot work: a
//     configuration to fix, found at start-up.
//   - [ErrInvalidArgument] is wrapped by the error of a call given an
//     argument it cannot use (Produce without a topic or records,
//     SendOffsets without a group, a Txn without its ids): nothing was sent.
//   - [ErrClosed] is returned by Produce after Close.
//   - [ErrOutcomeUnknown] is wrapped by Produce errors after which the batch
//     may or may not be in the log: the delivery timeout ran out while the
//     broker did not answer.
//   - [ErrFenced] is wrapped by every error of a TxProducer whose
//     transactional id was taken over by a newer producer (Kafka's
//     PRODUCER_FENCED or INVALID_PRODUCER_EPOCH).
//   - [ErrAborted] is wrapped by CommitPrepared's error when the transaction
//     was aborted (it timed out, or a producer of the same transactional id
//     started before it was committed): its records are gone.
//   - [ErrTimedOut] is wrapped, instead of ErrFenced, by the error of a
//     TxProducer whose open transaction the broker refused after it had been
//     open for TransactionTimeout or longer: the broker aborted it by its
//     timeout and bumped the producer's epoch, so it answers as to a fenced
//     producer, although no other producer of the id need exist.
//   - [ErrAbortable] is wrapped by a TxProducer error after which the open
//     transaction cannot commit (the broker lost the producer's state, or a
//     batch's outcome is unknown): call Abort, then start again.
//   - [ErrNoOpenTransaction] is wrapped by AbortTransaction's error when the
//     transactional id has no transaction open: nothing was done.
//   - [FormatError] is the error (wrapped) Fetch returns for a record batch
//     older than the v2 format (Kafka before 0.11, not converted by the
//     broker): it names the partition and the batch's offset.
//
// # Guarantees
//
//   - A Produce that returns nil wrote its records once, with acks=all,
//     however many attempts it took, including after lost acknowledgements
//     and broker restarts.
//
//   - An error wrapping ErrOutcomeUnknown may have written the records (at
//     most once); any other Produce error wrote nothing. With
//     ProducerOptions.SettleUnknown, Produce returns ErrOutcomeUnknown
//     only when Close ends its wait for a broker's answer.
//
//   - Records of one partition are written in Produce order.
//
//   - Reader hands out every committed record (and every record written
//     without a transaction) once, in offset order, and no record of an
//     aborted transaction and no control record. It reads up to the last
//     stable offset only, so an open transaction holds it back. Its
//     records read as the Java consumer's: nil for a null key, value or
//     header value and an empty slice for an empty one, the broker's
//     append time on a LogAppendTime topic; a Fetch that ends with its
//     context returns an error wrapping the context's.
//
//   - TxProducer: the records of a transaction become visible to
//     read_committed readers all at once when Commit returns nil, or
//     never; each once, however many attempts each batch took. After
//     ErrFenced the producer writes nothing more, and its open
//     transaction is aborted by the producer that fenced it.
//
//   - A Commit error wrapping ErrOutcomeUnknown (EndTxn went unanswered
//     until DeliveryTimeout) may have committed the transaction; calling
//     Commit again, or CommitPrepared with its Txn, tells which. Any
//     other Commit error wrapping ErrFenced or ErrTimedOut did not commit.
//
//   - A transaction runs one protocol from its first request to its
//     end (Txn.Version): v2 only where the broker's finalized
//     transaction.version was 2 or more when it began, else v1. A
//     running TxProducer reads the level again at a transaction start,
//     at most every 30 seconds, and follows a change both ways
//     (TransactionVersion): a v1 to v2 switch after a v1 transaction
//     bumps the epoch first, as every v1 transaction end does. A
//     transaction open while the level changes ends in the protocol it
//     began with (on Apache Kafka 4.4 it commits or aborts either way).
//
//   - CommitPrepared returns nil only when the transaction is committed,
//     and ErrAborted when it never will be (aborted by its timeout, by a
//     new producer of the id, or before the broker expired the
//     transactional id: INVALID_PRODUCER_ID_MAPPING is settled by the
//     log's marker too); it never commits another transaction of the id.
//
//   - A TxProducer error wraps ErrTimedOut, not ErrFenced, when the
//     broker refused a transaction open for TransactionTimeout or longer;
//     the broker cannot have aborted a transaction by its timeout before
//     Txn.Expires.
//
//   - ListTransactions and DescribeTransactions only read.
//     AbortTransaction aborts only a transaction open when it asked (an
//     id without one is ErrNoOpenTransaction, nothing done), and returns
//     nil once the abort is complete: the coordinator has written its
//     markers and fenced the producer that held it.
//
// What it assumes: the broker enforces idempotence (Kafka 0.11+, enabled
// by default since 3.0); the same producer id is never used by two
// Producers (each NewProducer gets its own); this process's clock runs at
// the broker's rate (Txn.Expires is measured here, the timeout there).
//
// # Brokers
//
// Apache Kafka 3.x and 4.x: every request is at or above the lowest
// version Kafka 4.0 kept (KIP-896). Where the broker's finalized
// transaction.version is 2 or more (a 4.x cluster created at 4.0 or later)
// a transaction runs under transactions v2 (KIP-890: the broker bumps the
// epoch at EndTxn); on 3.x, and on 4.x with the feature at 1, under v1
// (TxProducer bumps the epoch). The tests run on Apache Kafka 4.4.0 (make
// test: v2, and v1 forced), 4.0.2, 4.2.2 and 4.4.0 with
// transaction.version 1, and 3.9.2 (make test-compat), and three 4.4.0
// brokers under leader and coordinator kills (make test-cluster).
// docs/design/kafka-protocol.md lists the version of every request and
// what the real brokers showed that kfake did not.
package kafkatxn
