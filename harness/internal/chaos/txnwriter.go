package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/exactlyonce/exactlyonce/harness/internal/chaos/history"
	"github.com/exactlyonce/exactlyonce/harness/internal/demo"
	"github.com/exactlyonce/exactlyonce/kafkatxn"
)

// writeTransactions writes transactions of one to five records across the
// writer's topic until ctx ends, committing four in five and aborting the
// rest, and records each with its outcome: committed (OK) only when Commit
// returned nil; unknown (Info) when Commit failed; aborted (Fail) when
// Commit was never sent. A producer that failed is replaced by one with the
// next transactional id (txnID); the broker aborts the old one's open
// transaction after its timeout.
//
// Why not the same id, which would fence the old producer at once: kfake,
// killed with a transaction open, aborts it on restart without writing an
// abort marker, and on its next restart reads the transaction's records as
// part of the same producer id's next committed transaction, the one a
// replacement with the same id (and so the same producer id) writes: the
// history's checkers reported that as an aborted read and a skipped poll
// (seed 1796488805607537950). Kafka's coordinator writes the marker.
func (c *chaos) writeTransactions(ctx context.Context) {
	rng := rand.New(rand.NewPCG(c.cfg.Seed, 0x7e4))
	brokers := c.d.Servers.Brokers
	var tp *kafkatxn.TxProducer
	defer func() {
		if tp != nil {
			_ = tp.Close()
		}
	}()
	for n := 0; ctx.Err() == nil; n++ {
		if tp == nil {
			var err error
			if tp, err = kafkatxn.NewTxProducer(ctx, brokers, c.txnID(), kafkatxn.TxOptions{TransactionTimeout: txnTimeout,
				// kfake, SIGKILLed by kafka-kill, aborts the open
				// transaction on restart by bumping the producer's
				// epoch, and then answers that transaction's EndTxn v5
				// commit as a retry of a finished commit (its KIP-890
				// retry check: epoch one ahead, none open), with
				// success: the history's checkers reported its records
				// lost (seed 1796582259817965718). Apache Kafka keeps
				// an open transaction across a coordinator restart.
				// Transactions v1 get PRODUCER_FENCED there, the truth.
				TransactionsV1:  c.d.Servers.Kfake != nil,
				ProducerOptions: kafkatxn.ProducerOptions{DeliveryTimeout: 10 * time.Second}}); err != nil {
				tp = nil
				demo.Sleep(ctx, nil, 200*time.Millisecond)
				continue
			}
		}
		var order *writerFault // a fault's (pauses.go), for this transaction
		select {
		case f := <-c.writerFaults:
			order = &f
			demo.Sleep(ctx, nil, f.idle)
		default:
		}
		keys := make([]string, 1+rng.IntN(5))
		for i := range keys {
			keys[i] = fmt.Sprintf("t%d-%d", n, i)
		}
		commit := rng.IntN(5) > 0 || (order != nil && order.beforeCommit > 0)
		v := history.Value{Table: streamTxn, Keys: keys}
		c.hist.h.Add(history.Op{Process: "txn-writer", Type: history.Invoke, F: history.Txn, Value: v})
		// A transaction begun is ended, even when ctx ends meanwhile (the
		// run stops the writer): one left open would hold the topic's last
		// stable offset back, and the final read with it, for the
		// transaction timeout (and on Apache Kafka up to 10 s more).
		opCtx := context.WithoutCancel(ctx)
		var err error
		for i, k := range keys {
			if _, err = tp.Produce(opCtx, c.txnTopic(), i%txnPartitions, kafkatxn.Record{Key: []byte(k), Value: []byte(k)}); err != nil {
				break
			}
		}
		v.Txn = fmt.Sprintf("%d/%d", tp.Txn().ProducerID, tp.Txn().Epoch)
		t := history.Fail
		switch {
		case err != nil:
			v.Detail = "produce: " + err.Error()
		case !commit:
			if err = tp.Abort(opCtx); err != nil {
				v.Detail = "abort: " + err.Error() // never committed all the same
			}
		default:
			if order != nil {
				demo.Sleep(ctx, nil, order.beforeCommit)
			}
			if err = tp.Commit(opCtx); err != nil {
				t, v.Detail = history.Info, "commit: "+err.Error()
			} else {
				t = history.OK
			}
		}
		c.hist.h.Add(history.Op{Process: "txn-writer", Type: t, F: history.Txn, Value: v})
		if order != nil {
			order.done <- err
		}
		if err != nil {
			_ = tp.Close()
			tp = nil
			c.txnGen.Add(1)
		}
		demo.Sleep(ctx, nil, time.Duration(10+rng.IntN(40))*time.Millisecond)
	}
}
