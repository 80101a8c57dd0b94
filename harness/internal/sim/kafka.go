package sim

import (
	"errors"
	"fmt"
	"time"
)

// Errors of the Kafka model, named after the broker's error codes the
// kafkatxn package maps to its own sentinels.
var (
	// errFenced is PRODUCER_FENCED / INVALID_PRODUCER_EPOCH: the epoch of
	// the transactional id moved on (a newer producer, or an abort by
	// timeout bumped it). kafkatxn reports it as ErrFenced.
	errFenced = errors.New("kafka model: producer fenced")
	// errInvalidMapping is INVALID_PRODUCER_ID_MAPPING: the transactional
	// id expired (transactional.id.expiration.ms) while no transaction of
	// it was open.
	errInvalidMapping = errors.New("kafka model: invalid producer id mapping")
	// errAborted is what kafkatxn.CommitPrepared returns (ErrAborted) when
	// the log says the transaction ended aborted.
	errAborted = errors.New("kafka model: transaction aborted")
)

type txnState uint8

const (
	txnOngoing txnState = iota
	txnCommitted
	txnAborted
)

func (s txnState) String() string {
	return [...]string{"ongoing", "committed", "aborted"}[s]
}

// txn is one transaction of a transactional id: the records it wrote and
// how it ended.
type txn struct {
	seq       int // unique in the broker, from 1
	pid       int64
	epoch     int16
	start     time.Time // the broker's clock at its first record
	state     txnState
	byTimeout bool // aborted by the broker's transaction timeout
}

// producerID is the broker's state of one transactional id.
type producerID struct {
	pid     int64
	epoch   int16
	cur     *txn // the ongoing transaction, nil when none
	lastUse time.Time
}

// logRecord is one record of the output partition.
type logRecord struct {
	txn   *txn
	value string
}

// Broker models a Kafka transaction coordinator and one output partition:
// transactions time out on the broker's clock (the simulation's, not the
// processor's, which may jump), an abort by timeout bumps the epoch so the
// producer is fenced, a new producer of the id (InitProducerID) aborts the
// ongoing transaction and bumps the epoch, and an id unused for longer
// than IDExpiration is forgotten. Markers are modelled as the transaction's
// final state, which read_committed consumers obey.
type Broker struct {
	TxnTimeout   time.Duration
	IDExpiration time.Duration

	clock   func() time.Time
	logf    func(format string, args ...any)
	nextPID int64
	ids     map[string]*producerID
	txns    []*txn
	log     []logRecord
}

func newBroker(clock func() time.Time, logf func(string, ...any), timeout, expiration time.Duration) *Broker {
	return &Broker{TxnTimeout: timeout, IDExpiration: expiration, clock: clock, logf: logf, nextPID: 1000, ids: map[string]*producerID{}}
}

// advance applies what the broker does on its own as time passes: abort
// transactions older than the timeout (bumping the epoch) and expire ids
// idle longer than IDExpiration.
func (b *Broker) advance() {
	now := b.clock()
	for id, p := range b.ids {
		if p.cur != nil && now.Sub(p.cur.start) > b.TxnTimeout {
			b.logf("kafka: transaction %d of %s aborted by timeout, epoch %d", p.cur.seq, id, p.epoch+1)
			p.cur.state, p.cur.byTimeout = txnAborted, true
			p.cur = nil
			p.epoch++
			p.lastUse = now
		}
		if p.cur == nil && now.Sub(p.lastUse) > b.IDExpiration {
			delete(b.ids, id)
		}
	}
}

// oldestOpen returns the age of the oldest ongoing transaction.
func (b *Broker) oldestOpen() (time.Duration, bool) {
	now := b.clock()
	var age time.Duration
	found := false
	for _, p := range b.ids {
		if p.cur != nil && (!found || now.Sub(p.cur.start) > age) {
			age, found = now.Sub(p.cur.start), true
		}
	}
	return age, found
}

// InitProducer is InitProducerID: it aborts the id's ongoing transaction
// and returns a new epoch (or a new producer id for an unknown id).
func (b *Broker) InitProducer(id string) (int64, int16) {
	b.advance()
	p := b.ids[id]
	if p == nil {
		b.nextPID++
		p = &producerID{pid: b.nextPID}
		b.ids[id] = p
	} else {
		if p.cur != nil {
			b.logf("kafka: InitProducerID of %s aborts transaction %d", id, p.cur.seq)
			p.cur.state = txnAborted
			p.cur = nil
		}
		p.epoch++
	}
	p.lastUse = b.clock()
	b.logf("kafka: InitProducerID of %s: pid %d epoch %d", id, p.pid, p.epoch)
	return p.pid, p.epoch
}

func (b *Broker) producer(id string, pid int64, epoch int16) (*producerID, error) {
	p := b.ids[id]
	switch {
	case p == nil || p.pid != pid:
		return nil, errInvalidMapping
	case p.epoch != epoch:
		return nil, errFenced
	}
	return p, nil
}

// Produce appends values inside the id's transaction, opening one.
func (b *Broker) Produce(id string, pid int64, epoch int16, values []string) (*txn, error) {
	b.advance()
	p, err := b.producer(id, pid, epoch)
	if err != nil {
		return nil, err
	}
	if p.cur == nil {
		p.cur = &txn{seq: len(b.txns) + 1, pid: pid, epoch: epoch, start: b.clock()}
		b.txns = append(b.txns, p.cur)
		b.logf("kafka: transaction %d begins (epoch %d)", p.cur.seq, epoch)
	}
	for _, v := range values {
		b.log = append(b.log, logRecord{txn: p.cur, value: v})
	}
	p.lastUse = b.clock()
	return p.cur, nil
}

// Commit is EndTxn(commit) of the producer's ongoing transaction.
func (b *Broker) Commit(id string, pid int64, epoch int16) error {
	b.advance()
	p, err := b.producer(id, pid, epoch)
	if err != nil {
		return err
	}
	if p.cur != nil {
		b.logf("kafka: transaction %d committed", p.cur.seq)
		p.cur.state = txnCommitted
		p.cur = nil
	}
	p.lastUse = b.clock()
	return nil
}

// Abort is EndTxn(abort) of the producer's ongoing transaction.
func (b *Broker) Abort(id string, pid int64, epoch int16) error {
	b.advance()
	p, err := b.producer(id, pid, epoch)
	if err != nil {
		return err
	}
	if p.cur != nil {
		b.logf("kafka: transaction %d aborted", p.cur.seq)
		p.cur.state = txnAborted
		p.cur = nil
	}
	p.lastUse = b.clock()
	return nil
}

// CommitPrepared is kafkatxn.CommitPrepared: commit the transaction seq if
// it is still the id's ongoing one under pid and epoch; otherwise the log
// says how it ended (committed: nil; aborted: errAborted).
func (b *Broker) CommitPrepared(id string, pid int64, epoch int16, seq int) error {
	b.advance()
	if seq < 1 || seq > len(b.txns) {
		return fmt.Errorf("kafka model: no transaction %d", seq)
	}
	t := b.txns[seq-1]
	switch t.state {
	case txnCommitted:
		return nil
	case txnAborted:
		return errAborted
	}
	p, err := b.producer(id, pid, epoch)
	if err != nil || p.cur != t {
		// Not reachable in the model: an ongoing transaction is its id's
		// current one, and a new epoch aborts it first.
		return fmt.Errorf("kafka model: transaction %d ongoing under another epoch: %v", seq, err)
	}
	t.state = txnCommitted
	p.cur = nil
	p.lastUse = b.clock()
	return nil
}

// txnState returns the state of transaction seq.
func (b *Broker) txnOf(seq int) *txn {
	if seq < 1 || seq > len(b.txns) {
		return nil
	}
	return b.txns[seq-1]
}

// ReadCommitted returns the values a read_committed consumer reads once
// every transaction ended.
func (b *Broker) ReadCommitted() []string {
	var out []string
	for _, r := range b.log {
		if r.txn.state == txnCommitted {
			out = append(out, r.value)
		}
	}
	return out
}
