package journal

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sync"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink"
)

// ownerRecord is the journal's one mutable object, changed only by
// compare-and-swap: Claim raises Epoch, Prune raises Pruned. Because both go
// through the same record, a Prune that succeeds proves its writer was still
// the owner at that instant, and a claim makes every earlier owner's Prune
// fail.
type ownerRecord struct {
	Epoch       uint64         `json:"epoch"`
	Owner       string         `json:"owner"`
	Incarnation string         `json:"incarnation"`
	Pruned      *sink.Position `json:"pruned,omitempty"`
}

// ackRecord acknowledges the entry of epoch Epoch that starts at First: its
// batch is in ClickHouse. It is a create-only object of its own, so that the
// owner that writes it never rewrites another owner's entry.
type ackRecord struct {
	First    sink.Position `json:"first"`
	Epoch    uint64        `json:"epoch"`
	AckEpoch uint64        `json:"ack_epoch"`
	// Through, when set, says ClickHouse holds an earlier, longer version
	// of the entry's batch under its token (see sink.Intent.Earlier): a
	// load reports the entry as ending there.
	Through *sink.Position `json:"through,omitempty"`
}

// claimAttempts bounds how many claims racing with this one Claim outlasts.
const claimAttempts = 32

var nameSegment = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// Journal is the sink's write-ahead journal for one (table, topic, partition),
// kept in a checkpoint.Storage so that whichever instance takes the partition
// over after a rebalance reads it.
//
// Layout under sink.JournalPrefix/table/topic/partition/:
//
//	owner                             {"epoch","owner","incarnation","pruned"}
//	b-<offset>-<index>-<epoch>        one sink.Intent (JSON), named by first position
//	a-<offset>-<index>-<epoch>-<ack>  an ack of that entry by epoch <ack>
//
// The owner record is the only object ever rewritten, and only by
// compare-and-swap (checkpoint.Storage.Replace, or Create for the first
// claim); entries and acks are create-only, and their names carry the epoch
// of their writer, so two owners never write the same name.
//
// Fencing: Claim raises the epoch by a conditional write, so each epoch has
// exactly one owner, however many instances claim at once. Record creates an
// intent and then re-reads the owner record; an instance that sees another
// owner returns sink.ErrFenced and must not insert. Because an owner that passed
// that check had written its intent before the new owner's claim, the new
// owner's Load sees the intent and replays it with the same token. Prune
// raises the prune point in the owner record by compare-and-swap before it
// deletes anything, so a fenced owner can neither move the prune point nor
// delete.
//
// Writes: one Create per batch (its intent, which also carries the previous
// batch's ack), one Replace per pruning checkpoint and one Delete per pruned
// entry; Claim, replays and Ack of a replayed batch write more.
//
// A Journal is safe for concurrent use: a sink prunes it in the
// checkpoint's background goroutine while its chain journals the next
// batch. Its methods take one mutex, except CheckOwner, which reads only
// what Claim sets and may run concurrently with every method but Claim (a
// sink checks ownership before an insert retry in the background while it
// journals the next batch), and Pruned, which reads only the storage.
type Journal struct {
	mu          sync.Mutex // guards owner, version, ackedThrough, known and reach, and epoch against Claim
	store       checkpoint.Storage
	prefix      string
	table       string
	src         checkpoint.TopicPartition
	instance    string
	epoch       uint64
	incarnation string

	owner        ownerRecord        // as this handle last wrote it
	version      checkpoint.Version // of owner, as stored
	ackedThrough *sink.Position     // AckLater: carried by the next Record
	known        []entryRef
	reach        *sink.Position // see Reach; set by Load
}

// entryRef is an entry this handle wrote or loaded, deletable once pruned.
type entryRef struct {
	name string
	last sink.Position
}

func maxPos(a *sink.Position, b sink.Position) *sink.Position {
	if a == nil || b.Compare(*a) > 0 {
		return &b
	}
	return a
}

// Open returns the journal of table for src. Table, topic must consist
// of [A-Za-z0-9._-]. Nothing is read until Claim.
func Open(store checkpoint.Storage, table string, src checkpoint.TopicPartition) (*Journal, error) {
	if store == nil {
		return nil, errors.New("sink: journal: nil storage")
	}
	if !nameSegment.MatchString(table) || !nameSegment.MatchString(src.Topic) || src.Partition < 0 {
		return nil, fmt.Errorf("sink: journal: table %q and topic %q must match [A-Za-z0-9._-]+, partition %d must be >= 0", table, src.Topic, src.Partition)
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	return &Journal{
		store:    store,
		prefix:   fmt.Sprintf("%s%s/%s/%d/", sink.JournalPrefix, table, src.Topic, src.Partition),
		table:    table,
		src:      src,
		instance: hex.EncodeToString(id[:]),
	}, nil
}

// Instance returns this journal handle's random instance id.
func (j *Journal) Instance() string { return j.instance }

// Epoch returns the epoch claimed by Claim, 0 before.
func (j *Journal) Epoch() uint64 { return j.epoch }

// Claim makes this instance the owner: it raises the owner epoch by one
// with a conditional write. Of instances claiming at once each gets an epoch
// of its own (a loser of the race tries again on the epoch after), so the
// last to claim owns the journal and every earlier owner's Record and Prune
// fail with sink.ErrFenced from then on.
func (j *Journal) Claim(ctx context.Context) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	name := j.prefix + "owner"
	for range claimAttempts {
		var rec ownerRecord
		b, v, err := j.store.GetVersion(ctx, name)
		switch {
		case errors.Is(err, checkpoint.ErrNotFound):
			var inc [8]byte
			_, _ = rand.Read(inc[:])
			rec.Incarnation = hex.EncodeToString(inc[:])
		case err != nil:
			return fmt.Errorf("sink: journal %s: read owner: %w", j.prefix, err)
		default:
			if err := json.Unmarshal(b, &rec); err != nil {
				return fmt.Errorf("%w: owner record: %v", sink.ErrCorrupt, err)
			}
		}
		rec.Epoch++
		rec.Owner = j.instance
		out, _ := json.Marshal(rec)
		var nv checkpoint.Version
		if v == "" {
			nv, err = j.store.Create(ctx, name, out)
		} else {
			nv, err = j.store.Replace(ctx, name, out, v)
		}
		if errors.Is(err, checkpoint.ErrConflict) {
			continue // another instance claimed meanwhile: claim the epoch after
		}
		if err != nil {
			// Unknown outcome: the record says whether it was applied (it
			// names this instance, so no one else stores these bytes).
			got, gv, gerr := j.store.GetVersion(ctx, name)
			if gerr != nil || string(got) != string(out) {
				return fmt.Errorf("sink: journal %s: claim: %w", j.prefix, err)
			}
			nv = gv
		}
		j.owner, j.version = rec, nv
		j.epoch = rec.Epoch
		j.incarnation = rec.Incarnation
		// Acks noted in the previous epoch name positions that the new epoch
		// may cut again; carried into it they would acknowledge its batches
		// before they are inserted.
		j.ackedThrough = nil
		j.known = j.known[:0]
		return nil
	}
	return fmt.Errorf("%w: %s: lost %d claim races in a row", sink.ErrFenced, j.src, claimAttempts)
}

// Token returns the insert_deduplication_token of the batch [first, last].
// It depends only on the journal's incarnation (created with the journal, so
// a wiped journal never reuses an old token), the source and the positions.
func (j *Journal) Token(first, last sink.Position) string {
	return fmt.Sprintf("eo1:%s:%s:%d:%s-%s", j.incarnation, j.src.Topic, j.src.Partition, first, last)
}

func (j *Journal) entryName(in sink.Intent) string {
	return fmt.Sprintf("%sb-%020d-%010d-%020d", j.prefix, in.First.Offset, in.First.Index, in.Epoch)
}

func (j *Journal) ackName(in sink.Intent, ackEpoch uint64) string {
	return fmt.Sprintf("%sa-%020d-%010d-%020d-%020d", j.prefix, in.First.Offset, in.First.Index, in.Epoch, ackEpoch)
}

// create writes a create-only object. A conflict over the very same bytes is
// this handle's own earlier write whose outcome was unknown: success.
func (j *Journal) create(ctx context.Context, name string, data []byte) error {
	_, err := j.store.Create(ctx, name, data)
	if errors.Is(err, checkpoint.ErrConflict) {
		if got, gerr := j.store.Get(ctx, name); gerr == nil && string(got) == string(data) {
			return nil
		}
		return fmt.Errorf("%w: %s written twice with different content: %v", sink.ErrCorrupt, name, err)
	}
	return err
}

// CheckOwner returns sink.ErrFenced if another instance claimed the journal.
func (j *Journal) CheckOwner(ctx context.Context) error {
	b, err := j.store.Get(ctx, j.prefix+"owner")
	if err != nil {
		return fmt.Errorf("sink: journal %s: read owner: %w", j.prefix, err)
	}
	var rec ownerRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return fmt.Errorf("%w: owner record: %v", sink.ErrCorrupt, err)
	}
	if rec.Owner != j.instance || rec.Epoch != j.epoch {
		return fmt.Errorf("%w (%s: epoch %d owned by %s, this instance %s epoch %d)", sink.ErrFenced, j.src, rec.Epoch, rec.Owner, j.instance, j.epoch)
	}
	return nil
}

// Record durably creates in as a new intent owned by this instance, then
// checks ownership. Only after Record returns nil may the batch be inserted.
// The intent also carries the acknowledgements noted by AckLater.
//
// The ownership check re-reads the owner record after every intent, even
// when nothing seems to have changed: it is what orders this intent before
// any later Claim. If the read shows this instance still owner, the intent's
// write happened before the new owner's Claim, so the new owner's Load, which
// follows its Claim, sees the intent and replays it with the same token; if
// the check were skipped, an intent written after a takeover could be
// inserted while the new owner, which never saw it, cuts the same positions
// differently: a duplicate. The intent's name carries this owner's epoch, so
// a fenced owner's intent never replaces the new owner's over the same
// positions.
func (j *Journal) Record(ctx context.Context, in *sink.Intent) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.epoch == 0 {
		return errors.New("sink: journal: Record before Claim")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	in.Version = sink.IntentVersion
	in.Table, in.Topic, in.Partition = j.table, j.src.Topic, j.src.Partition
	in.Epoch, in.Owner = j.epoch, j.instance
	in.AckedThrough = j.ackedThrough
	b, _ := json.Marshal(in)
	name := j.entryName(*in)
	if err := j.create(ctx, name, b); err != nil {
		return fmt.Errorf("sink: journal %s: record %s..%s: %w", j.prefix, in.First, in.Last, err)
	}
	j.known = append(j.known, entryRef{name: name, last: in.Last})
	return j.CheckOwner(ctx)
}

// AckLater notes that ClickHouse acknowledged in, a batch recorded by this
// handle in its current epoch; the next Record carries the ack. Until then
// a replay re-inserts in with its token and ClickHouse drops it, like any
// batch whose ack was lost, so deferring the ack costs nothing in
// correctness, only (after a crash) one deduplicated re-insert that the
// deduplication window must cover, as it must the batch in flight.
func (j *Journal) AckLater(in *sink.Intent) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if in.Epoch == j.epoch && in.Owner == j.instance {
		j.ackedThrough = maxPos(j.ackedThrough, in.Last)
	}
}

// Ack marks in as acknowledged by ClickHouse, with an ack record of this
// epoch beside the entry (the entry itself, possibly another owner's, is
// never rewritten). Losing an ack is harmless: the batch is then re-inserted
// with its token on replay and deduplicated.
func (j *Journal) Ack(ctx context.Context, in *sink.Intent) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	b, _ := json.Marshal(ackRecord{First: in.First, Epoch: in.Epoch, AckEpoch: j.epoch})
	name := j.ackName(*in, j.epoch)
	if err := j.create(ctx, name, b); err != nil {
		return fmt.Errorf("sink: journal %s: ack %s..%s: %w", j.prefix, in.First, in.Last, err)
	}
	in.Acked, in.AckEpoch = true, max(in.AckEpoch, j.epoch)
	j.known = append(j.known, entryRef{name: name, last: in.Last})
	return nil
}

// AckHeld acknowledges in as Ack does, and records that ClickHouse holds
// an earlier version of its batch under its token, one that ends at
// through, after in.Last (see sink.Intent.Earlier): a load then reports in
// as ending at through, so the positions after in.Last up to through are
// not inserted again.
func (j *Journal) AckHeld(ctx context.Context, in *sink.Intent, through sink.Position) error {
	b, _ := json.Marshal(ackRecord{First: in.First, Epoch: in.Epoch, AckEpoch: j.epoch, Through: &through})
	name := j.ackName(*in, j.epoch)
	if err := j.create(ctx, name, b); err != nil {
		return fmt.Errorf("sink: journal %s: ack %s..%s: %w", j.prefix, in.First, in.Last, err)
	}
	in.Acked, in.AckEpoch = true, max(in.AckEpoch, j.epoch)
	if through.Compare(in.Last) > 0 {
		in.Last = through
	}
	j.known = append(j.known, entryRef{name: name, last: in.Last})
	return nil
}
