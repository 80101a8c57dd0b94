package kafkatxn_test

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/exactlyonce/exactlyonce/kafkatxn"
)

// A transaction that aborts, one that commits, and one recorded by a
// producer that died before its commit, resolved by CommitPrepared as a
// restore does. A read_committed Reader sees the committed records only.
func ExampleTxProducer() {
	ctx := context.Background()
	k, _ := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "out")) // your brokers in production
	defer k.Close()
	brokers := k.ListenAddrs()

	p, err := kafkatxn.NewTxProducer(ctx, brokers, "example-tx", kafkatxn.TxOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	_, _ = p.Produce(ctx, "out", 0, kafkatxn.Record{Value: []byte("aborted")})
	_ = p.Abort(ctx)
	_, _ = p.Produce(ctx, "out", 0, kafkatxn.Record{Value: []byte("committed")})
	_ = p.Commit(ctx)
	_, _ = p.Produce(ctx, "out", 0, kafkatxn.Record{Value: []byte("prepared")})
	txn := p.Txn() // a checkpoint would store this
	p.Close()      // the process dies before its commit

	if err := kafkatxn.CommitPrepared(ctx, brokers, txn, kafkatxn.TxOptions{}); err != nil {
		fmt.Println(err)
		return
	}
	r, _ := kafkatxn.NewReader(brokers, "out", 0, 0, kafkatxn.ReaderOptions{MaxWait: 50 * time.Millisecond})
	defer r.Close()
	for r.Offset() < 6 { // 3 records and 3 transaction markers
		fctx, cancel := context.WithTimeout(ctx, time.Second)
		msgs, err := r.Fetch(fctx)
		cancel()
		if err != nil {
			break
		}
		for _, m := range msgs {
			fmt.Println(string(m.Value))
		}
	}
	// Output:
	// committed
	// prepared
}
