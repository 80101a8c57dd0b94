package kafkatxn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/internal/kafkawire"
)

// The states a transaction coordinator reports for a transactional id
// (Kafka's TransactionState names). An id whose transaction is open pins
// the last stable offset of every partition the transaction wrote to:
// read_committed consumers of those partitions see nothing past its first
// record until it ends.
const (
	StateEmpty             = "Empty"   // no transaction since the producer started
	StateOngoing           = "Ongoing" // a transaction is open
	StatePrepareCommit     = "PrepareCommit"
	StatePrepareAbort      = "PrepareAbort"
	StateCompleteCommit    = "CompleteCommit"
	StateCompleteAbort     = "CompleteAbort"
	StateDead              = "Dead"
	StatePrepareEpochFence = "PrepareEpochFence"
)

// ErrNoOpenTransaction is wrapped by AbortTransaction's error when the
// transactional id has no transaction open: nothing was done.
var ErrNoOpenTransaction = errors.New("kafkatxn: no open transaction")

// TxnListing is a transactional id a coordinator knows, as ListTransactions
// reports it.
type TxnListing struct {
	TransactionalID string
	ProducerID      int64
	State           string
	Coordinator     int // the broker coordinating the id
}

// TxnDescription is the state of a transactional id, as its coordinator
// describes it (DescribeTransactions).
type TxnDescription struct {
	TransactionalID string
	State           string
	ProducerID      int64
	ProducerEpoch   int16
	// Timeout is the id's transaction timeout: the coordinator aborts a
	// transaction open longer.
	Timeout time.Duration
	// Started is when the open transaction began (its first partition
	// was added); zero when none is open.
	Started time.Time
	// Partitions the open transaction wrote to, by topic; while it
	// completes, only those still without a marker.
	Partitions  map[string][]int
	Coordinator int
}

// Open reports whether d's transaction is open (or completing): it pins
// the last stable offset of its partitions.
func (d TxnDescription) Open() bool {
	switch d.State {
	case StateOngoing, StatePrepareCommit, StatePrepareAbort, StatePrepareEpochFence:
		return true
	}
	return false
}

// ListFilter narrows ListTransactions. The zero value lists every
// transactional id.
type ListFilter struct {
	// States keeps the ids in one of these states (see StateOngoing...).
	States []string
	// ProducerIDs keeps the ids of these producer ids.
	ProducerIDs []int64
	// Prefix keeps the ids that start with it (kafkasink's ids start with
	// its prefix), filtered here, not by the brokers.
	Prefix string
}

// ListTransactions asks every broker of the cluster for the transactional
// ids it coordinates (ListTransactions v0, Kafka 3.0 and later) and
// returns them sorted by id. When a broker cannot be asked, it returns
// what the others answered with an error naming that broker. It only
// reads.
func ListTransactions(ctx context.Context, brokers []string, filter ListFilter, opts TxOptions) ([]TxnListing, error) {
	c, err := newTxClient(brokers, opts)
	if err != nil {
		return nil, err
	}
	defer c.close()
	var md *kafka.MetadataResponse
	err = c.retry(ctx, "list brokers", func(ctx context.Context) error {
		md, err = c.cl.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{}})
		return err
	})
	if err != nil {
		return nil, err
	}
	var out []TxnListing
	var errs []error
	for _, b := range md.Brokers {
		var ls []kafkawire.TxnListing
		var unknown []string
		err := c.retry(ctx, "list transactions", func(ctx context.Context) error {
			return c.onBroker(ctx, b.Host, b.Port, func(conn net.Conn) error {
				ls, unknown, err = kafkawire.ListTransactions(ctx, conn, c.clientID(), filter.States, filter.ProducerIDs)
				return err
			})
		})
		if err == nil && len(unknown) > 0 {
			err = fmt.Errorf("%w: unknown transaction states %q", ErrInvalidArgument, unknown)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("broker %d: %w", b.ID, err))
			continue
		}
		for _, l := range ls {
			if strings.HasPrefix(l.TransactionalID, filter.Prefix) {
				out = append(out, TxnListing{TransactionalID: l.TransactionalID, ProducerID: l.ProducerID, State: l.State, Coordinator: b.ID})
			}
		}
	}
	slices.SortFunc(out, func(a, b TxnListing) int { return strings.Compare(a.TransactionalID, b.TransactionalID) })
	return out, errors.Join(errs...)
}

// DescribeTransactions asks each id's coordinator for its state
// (DescribeTransactions v0, Kafka 3.0 and later), in the order of ids. An
// id the coordinator does not know is an error wrapping
// kafka.TransactionalIDNotFound. It only reads.
func DescribeTransactions(ctx context.Context, brokers []string, ids []string, opts TxOptions) ([]TxnDescription, error) {
	c, err := newTxClient(brokers, opts)
	if err != nil {
		return nil, err
	}
	defer c.close()
	out := make([]TxnDescription, 0, len(ids))
	for _, id := range ids {
		d, err := c.describe(ctx, id)
		if err != nil {
			return out, err
		}
		out = append(out, d)
	}
	return out, nil
}

// AbortTransaction aborts the open transaction of transactionalID, left by
// a producer that is gone, and returns its description from before. It
// does what a new producer of the id does at start (and what Kafka's
// Admin.fenceProducers does): InitProducerId with the id, so the
// coordinator aborts the open transaction, writes its abort markers, and
// bumps the epoch, fencing the old producer should it still live. It
// returns once the abort is complete, the last stable offsets moved on.
// An id without an open transaction is an error wrapping
// ErrNoOpenTransaction, and nothing is done.
//
// The transaction's records are lost: for a kafkasink transaction that a
// completed checkpoint recorded, restoring that checkpoint then fails with
// ErrAborted. Use it for ids whose owner will not come back.
func AbortTransaction(ctx context.Context, brokers []string, transactionalID string, opts TxOptions) (TxnDescription, error) {
	c, err := newTxClient(brokers, opts)
	if err != nil {
		return TxnDescription{}, err
	}
	defer c.close()
	d, err := c.describe(ctx, transactionalID)
	if err != nil {
		return d, err
	}
	if !d.Open() {
		return d, fmt.Errorf("kafkatxn: %s is %s: %w", transactionalID, d.State, ErrNoOpenTransaction)
	}
	err = c.retry(ctx, "abort transaction", func(ctx context.Context) error {
		res, err := c.cl.InitProducerID(ctx, &kafka.InitProducerIDRequest{
			TransactionalID: transactionalID, TransactionTimeoutMs: int(d.Timeout.Milliseconds()),
			ProducerID: -1, ProducerEpoch: -1,
		})
		if err == nil {
			err = res.Error
		}
		return err
	})
	return d, err
}

// describe describes one id at its coordinator.
func (c *txClient) describe(ctx context.Context, id string) (TxnDescription, error) {
	var d TxnDescription
	err := c.retry(ctx, "describe transaction", func(ctx context.Context) error {
		var err error
		d, err = c.describeOnce(ctx, id)
		return err
	})
	if err != nil {
		return d, fmt.Errorf("kafkatxn: describe %s: %w", id, err)
	}
	return d, nil
}

// describeOnce asks id's coordinator for its state, once.
func (c *txClient) describeOnce(ctx context.Context, id string) (TxnDescription, error) {
	var d TxnDescription
	fc, err := c.cl.FindCoordinator(ctx, &kafka.FindCoordinatorRequest{Key: id, KeyType: kafka.CoordinatorKeyTypeTransaction})
	if err == nil {
		err = fc.Error
	}
	if err == nil && fc.Coordinator == nil {
		err = kafka.GroupCoordinatorNotAvailable // code 15, for transactions too
	}
	if err != nil {
		return d, err
	}
	err = c.onBroker(ctx, fc.Coordinator.Host, fc.Coordinator.Port, func(conn net.Conn) error {
		ds, err := kafkawire.DescribeTransactions(ctx, conn, c.clientID(), []string{id})
		if err != nil {
			return err
		}
		if len(ds) != 1 {
			return fmt.Errorf("%w: %d descriptions for one id", kafkawire.ErrMalformed, len(ds))
		}
		w := ds[0]
		if w.ErrorCode != 0 {
			return kafka.Error(w.ErrorCode)
		}
		d = TxnDescription{TransactionalID: w.TransactionalID, State: w.State, ProducerID: w.ProducerID,
			ProducerEpoch: w.ProducerEpoch, Timeout: time.Duration(w.TimeoutMs) * time.Millisecond,
			Coordinator: fc.Coordinator.NodeID}
		if w.StartTimeMs >= 0 {
			d.Started = time.UnixMilli(w.StartTimeMs)
		}
		for topic, ps := range w.Topics {
			if d.Partitions == nil {
				d.Partitions = map[string][]int{}
			}
			for _, p := range ps {
				d.Partitions[topic] = append(d.Partitions[topic], int(p))
			}
		}
		return nil
	})
	return d, err
}

// onBroker runs f on a connection of its own to host:port, made the way the
// client's transport says, and closes it.
func (c *txClient) onBroker(ctx context.Context, host string, port int, f func(net.Conn) error) error {
	conn, err := kafkawire.Dial(ctx, kafkawire.TransportDialer(c.transport), c.clientID(), net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return err
	}
	defer conn.Close()
	return f(conn)
}

func (c *txClient) clientID() string {
	if c.transport != nil && c.transport.ClientID != "" {
		return c.transport.ClientID
	}
	return "exactlyonce"
}
