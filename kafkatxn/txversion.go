package kafkatxn

import (
	"context"
	"time"
)

// versionRecheck is how long a TxProducer runs on the transaction.version
// it last read before it reads it again, at the next transaction start.
// The Java client 4.x re-reads the finalized features at each transaction
// boundary from the ApiVersions answers its connections already got, and
// so sees a change only when a connection is made again; kafka-go's
// transport keeps those answers to itself, so a TxProducer asks
// (ApiVersions, one round trip) at most this often instead of at every
// transaction.
const versionRecheck = 30 * time.Second

// followVersion re-reads the broker's finalized transaction.version when
// no transaction is open and the last reading is versionRecheck old, and
// switches the protocol of the transactions to come, as the Java client
// 4.x does at a transaction boundary. Upgrading (1 to 2) after a v1
// transaction keeps the epoch bump begin does anyway, so the first v2
// transaction has an epoch of its own (Java bumps it for the same reason);
// downgrading (2 to 1) needs none, the last EndTxn v5 bumped it. A failed
// reading keeps the protocol: a transaction is not failed for it. p.mu is
// held.
func (p *TxProducer) followVersion(ctx context.Context) {
	if p.c.opts.TransactionsV1 || len(p.parts) > 0 || p.groups || time.Since(p.versionRead) < p.versionEvery {
		return
	}
	p.versionRead = time.Now()
	ctx, cancel := context.WithTimeout(ctx, p.c.opts.RequestTimeout)
	defer cancel()
	v, err := p.c.transactionVersion(ctx)
	if err != nil {
		if l := p.c.opts.Logger; l != nil {
			l.Warn("kafkatxn: reading transaction.version failed, keeping the protocol",
				"transactional_id", p.txid, "transaction_version", p.version(), "error", err)
		}
		return
	}
	if (v == 2) == p.v2 {
		return
	}
	if l := p.c.opts.Logger; l != nil {
		l.Info("kafkatxn: transaction version changed", "transactional_id", p.txid,
			"from", p.version(), "to", v)
	}
	p.v2 = v == 2
}

// version is TransactionVersion with p.mu held.
func (p *TxProducer) version() int {
	if p.v2 {
		return 2
	}
	return 1
}
