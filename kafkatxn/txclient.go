package kafkatxn

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"

	"github.com/exactlyonce/exactlyonce/internal/kafkawire"
)

// txClient sends the transaction coordinator's requests with retries.
type txClient struct {
	cl        *kafka.Client
	transport *kafka.Transport
	ownTrans  bool
	opts      TxOptions
}

func newTxClient(brokers []string, opts TxOptions) (*txClient, error) {
	if len(brokers) == 0 {
		return nil, fmt.Errorf("%w: no brokers", ErrInvalidOptions)
	}
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	c := &txClient{transport: opts.Transport, opts: opts}
	if c.transport == nil {
		c.transport, c.ownTrans = &kafka.Transport{}, true
	}
	c.cl = &kafka.Client{Addr: kafka.TCP(brokers...), Transport: c.transport, Timeout: opts.RequestTimeout}
	return c, nil
}

// roundTrip sends a request written by internal/kafkawire through the
// client's Transport, which routes it (coordinator, leader or any broker)
// and lends it a pooled connection.
func (c *txClient) roundTrip(ctx context.Context, req protocol.Message) (protocol.Message, error) {
	return c.transport.RoundTrip(ctx, c.cl.Addr, req)
}

// transactionVersion asks a broker (ApiVersions v3) which transaction
// protocol it runs for this client: 2 when its finalized
// transaction.version is 2 or more and it speaks EndTxn v5, Produce v12
// and TxnOffsetCommit v5 (KIP-890 part 2), else 1. A broker that cannot
// say (Kafka before 2.4 refuses ApiVersions v3) runs 1.
func (c *txClient) transactionVersion(ctx context.Context) (int, error) {
	if c.opts.TransactionsV1 {
		return 1, nil
	}
	var f kafkawire.Features
	err := c.retry(ctx, "api versions", func(ctx context.Context) error {
		res, err := c.roundTrip(ctx, kafkawire.ApiVersionsRequest(c.clientID()))
		if err == nil {
			f, err = kafkawire.ParseApiVersions(res)
		}
		return err
	})
	if isKafkaErr(err, kafka.UnsupportedVersion) {
		return 1, nil
	}
	if err != nil {
		return 0, err
	}
	if f.TransactionsV2() {
		return 2, nil
	}
	return 1, nil
}

func (c *txClient) close() {
	if c.ownTrans {
		c.transport.CloseIdleConnections()
	}
}

// coordinatorErr reports whether a transaction request should be sent
// again as is: the coordinator moved or is loading (kafka-go looks the
// coordinator up with FindCoordinator, key type transaction, before every
// transactional request, so the next attempt goes to the new one), a
// previous transaction of the id is still completing, or the connection
// broke.
func coordinatorErr(err error) bool {
	if isKafkaErr(err, kafka.NotCoordinatorForGroup, kafka.GroupCoordinatorNotAvailable,
		kafka.GroupLoadInProgress, kafka.ConcurrentTransactions, kafka.TransactionCoordinatorFenced) {
		return true
	}
	return retriable(err)
}

// The broker errors of transactions, in the classes of KIP-1050:
// retriable (coordinatorErr, and retriable for Produce), abortable
// (abortableErr: the open transaction cannot commit, Abort and go on) and
// fatal (fencedErr: the producer's epoch is gone). Transactions v1 and v2
// share them; v2 adds TRANSACTION_ABORTABLE.

func fencedErr(err error) bool {
	return isKafkaErr(err, kafka.ProducerFenced, kafka.InvalidProducerEpoch)
}

// abortableErr reports an answer to a transactional Produce after which
// the transaction cannot commit: the broker has no producer state or
// transaction matching the batch (it did not write it), or says so
// (KIP-890's TRANSACTION_ABORTABLE).
func abortableErr(err error) bool {
	return isKafkaErr(err, kafka.OutOfOrderSequenceNumber, kafka.UnknownProducerId, kafka.InvalidTransactionState,
		kafkawire.TransactionAbortable)
}

// concurrentTxBackoff is the wait before a request refused with
// CONCURRENT_TRANSACTIONS is sent again.
const concurrentTxBackoff = 20 * time.Millisecond

// retry calls f until it returns nil, a non-retriable error, or
// DeliveryTimeout runs out. Every call of f must be safe to repeat.
func (c *txClient) retry(ctx context.Context, op string, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.DeliveryTimeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		rctx, rcancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
		err := f(rctx)
		rcancel()
		if err == nil {
			return nil
		}
		if fencedErr(err) {
			// %v, not %w: the broker's error must not make this look
			// retriable to a classifier.
			return fmt.Errorf("kafkatxn: %s: %w (%v)", op, ErrFenced, err)
		}
		if !coordinatorErr(err) {
			return fmt.Errorf("kafkatxn: %s: %w", op, err)
		}
		wait := c.opts.wait(attempt)
		if isKafkaErr(err, kafka.ConcurrentTransactions) {
			// The id's previous transaction is still writing its markers
			// (Kafka answers this to the first request after every EndTxn
			// for a few milliseconds; kfake never does): a short, fixed
			// wait, as the Java client's 20 ms for this error.
			wait = min(c.opts.InitialBackoff, concurrentTxBackoff)
			attempt-- // not a failure that grows the backoff
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafkatxn: %s: %w (last error: %w)", op, ctx.Err(), err)
		case <-time.After(wait):
		}
	}
}

// MaxTransactionTimeout returns the smallest transaction.max.timeout.ms of
// the cluster's brokers (DescribeConfigs of each broker, as listed by
// Metadata): the longest TransactionTimeout that InitProducerID accepts
// whichever broker coordinates the transactional id.
func MaxTransactionTimeout(ctx context.Context, brokers []string, opts TxOptions) (time.Duration, error) {
	c, err := newTxClient(brokers, opts)
	if err != nil {
		return 0, err
	}
	defer c.close()
	var limit time.Duration
	err = c.retry(ctx, "describe transaction.max.timeout.ms", func(ctx context.Context) error {
		md, err := c.cl.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{}})
		if err != nil {
			return err
		}
		limit = 0
		for _, b := range md.Brokers {
			res, err := c.cl.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{{
				ResourceType: kafka.ResourceTypeBroker, ResourceName: strconv.Itoa(b.ID),
				ConfigNames: []string{"transaction.max.timeout.ms"},
			}}})
			if err != nil {
				return err
			}
			for _, r := range res.Resources {
				if r.Error != nil {
					return r.Error
				}
				for _, e := range r.ConfigEntries {
					if e.ConfigName != "transaction.max.timeout.ms" {
						continue
					}
					ms, err := strconv.ParseInt(e.ConfigValue, 10, 64)
					if err != nil {
						return fmt.Errorf("kafkatxn: broker %d: transaction.max.timeout.ms %q: %w", b.ID, e.ConfigValue, err)
					}
					if d := time.Duration(ms) * time.Millisecond; limit == 0 || d < limit {
						limit = d
					}
				}
			}
		}
		if limit == 0 {
			return fmt.Errorf("kafkatxn: no broker described transaction.max.timeout.ms")
		}
		return nil
	})
	return limit, err
}

// endTxn ends the transaction of txid run by (pid, epoch), with retries
// (endTxnOnce); next gets the producer id and epoch of the next
// transaction when the broker bumped them (v2). A repeated EndTxn of a
// transaction that ended so is answered with success (v2: the broker
// takes an epoch one below its own for a retry), so an attempt whose
// answer was lost is safe to repeat. An error after an attempt that went
// unanswered wraps ErrOutcomeUnknown: the transaction may have ended as
// asked.
func (c *txClient) endTxn(ctx context.Context, op, txid string, pid int64, epoch int16, commit, v2 bool,
	next func(pid int64, epoch int16)) error {
	unknown := false
	err := c.retry(ctx, op, func(ctx context.Context) error {
		npid, nepoch, err := c.endTxnOnce(ctx, txid, pid, epoch, commit, v2)
		if err == nil && v2 {
			next(npid, nepoch)
		}
		if err != nil && !definite(err) {
			unknown = true
		}
		return err
	})
	if err != nil && unknown && !IsFenced(err) {
		return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	}
	return err
}

// endTxnOnce sends one EndTxn: v5 when v2, answered with the producer id
// and epoch the broker bumped to; else kafka-go's EndTxn (v3), answered
// with neither.
func (c *txClient) endTxnOnce(ctx context.Context, txid string, pid int64, epoch int16, commit, v2 bool) (int64, int16, error) {
	if v2 {
		res, err := c.roundTrip(ctx, kafkawire.EndTxnRequest(c.clientID(), txid, pid, epoch, commit))
		if err != nil {
			return 0, 0, err
		}
		return kafkawire.ParseEndTxn(res)
	}
	res, err := c.cl.EndTxn(ctx, &kafka.EndTxnRequest{
		TransactionalID: txid, ProducerID: int(pid), ProducerEpoch: int(epoch), Committed: commit,
	})
	if err == nil {
		err = res.Error
	}
	return -1, -1, err
}
