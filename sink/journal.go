package sink

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// JournalPrefix is the storage name prefix under which journals live:
// JournalPrefix + table + "/" + topic + "/" + partition + "/".
const JournalPrefix = "sink-journal/"

const intentVersion = 1

// Intent is one journal entry: a batch the sink is about to insert (or did
// insert), identified by its source positions. It is recorded durably before
// the insert. Once ClickHouse acknowledged it, the ack normally rides on the
// next intent of the same epoch (AckedThrough) and Load reports the entry as
// Acked; a replayed batch's ack is a second write of the entry (Journal.Ack).
type Intent struct {
	Version   int       `json:"v"`
	Table     string    `json:"table"`
	Topic     string    `json:"topic"`
	Partition int32     `json:"partition"`
	First     Position  `json:"first"`
	Last      Position  `json:"last"`
	Rows      int       `json:"rows"`
	Hash      uint64    `json:"hash"`
	Token     string    `json:"token"`
	Epoch     uint64    `json:"epoch"` // owner epoch that wrote the intent
	Owner     string    `json:"owner"` // instance that wrote the intent
	Created   time.Time `json:"created"`
	// Block is the table's highest block number seen just before the insert,
	// used to tell whether a re-insert is still inside the deduplication
	// window; -1 when unknown.
	Block int64 `json:"block"`
	Acked bool  `json:"acked"`
	// AckEpoch is the owner epoch that set Acked.
	AckEpoch uint64 `json:"ack_epoch,omitempty"`
	// AckedThrough, set by Record from AckLater, acknowledges the earlier
	// entries of the same epoch and owner that end at or before it: the ack
	// of batch N rides on the intent of batch N+1 instead of a write of its
	// own. Load reports such entries as Acked.
	AckedThrough *Position `json:"acked_through,omitempty"`
	// PrunedThrough, set by Record from Prune, is the journal's prune point
	// when the intent was written (see Prune).
	PrunedThrough *Position `json:"pruned_through,omitempty"`
	// Supersedes is the token of the journaled batch over the same positions
	// that this one replaces: the replayed rows differed and were inserted
	// again under a fresh token (see ReinsertToken). Load returns this entry
	// in place of the one it supersedes.
	Supersedes string `json:"supersedes,omitempty"`
}

// ReinsertToken returns the insert_deduplication_token for content with
// hash replayed into the positions of a journaled batch whose token is prev
// but whose content differed. It is deterministic, so a second replay of
// the same new content gets the same token and ClickHouse drops it, and it
// differs from prev and from every token derived along another history:
// the suffix hashes prev (itself possibly derived) with the new hash.
func ReinsertToken(prev string, hash uint64) string {
	root, _, _ := strings.Cut(prev, "~r")
	h := fnv.New64a()
	_, _ = h.Write([]byte(prev))
	_, _ = h.Write(binary.BigEndian.AppendUint64(nil, hash))
	return fmt.Sprintf("%s~r%016x", root, h.Sum64())
}

type ownerRecord struct {
	Epoch       uint64 `json:"epoch"`
	Owner       string `json:"owner"`
	Incarnation string `json:"incarnation"`
}

type pruneRecord struct {
	Through Position `json:"through"`
}

var nameSegment = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// Journal is the sink's write-ahead journal for one (table, topic, partition),
// kept in a checkpoint.Storage so that whichever instance takes the partition
// over after a rebalance reads it.
//
// Layout under JournalPrefix/table/topic/partition/:
//
//	owner                      {"epoch","owner","incarnation"}: fencing record
//	pruned                     {"through"}: entries up to here were deleted
//	b-<offset>-<index>-<epoch> one Intent (JSON), named by first position
//
// Fencing: Claim raises the epoch and names this instance owner. Record
// writes an intent and then re-reads the owner record; an instance that sees
// another owner returns ErrFenced and must not insert. Because an owner that
// passed that check had written its intent before the new owner's claim, the
// new owner's Load sees the intent and replays it with the same token.
//
// Writes: one Put per batch (its intent, which also carries the previous
// batch's ack and the prune point) and one Delete per pruned entry; Claim,
// replays and Ack of a replayed batch write more.
//
// A Journal is used by one goroutine at a time, except CheckOwner, which
// reads only what Claim sets and may run concurrently with every method but
// Claim (a sink checks ownership before an insert retry in the background
// while it journals the next batch).
type Journal struct {
	store       checkpoint.Storage
	prefix      string
	table       string
	src         Source
	instance    string
	epoch       uint64
	incarnation string

	ackedThrough *Position // AckLater: carried by the next Record
	pruneWant    *Position // Prune: carried by the next Record
	pruneDurable *Position // carried by a durable intent: entries up to here may go
	known        []entryRef
}

// entryRef is an entry this handle wrote or loaded, deletable once pruned.
type entryRef struct {
	name string
	last Position
}

func maxPos(a *Position, b Position) *Position {
	if a == nil || b.Compare(*a) > 0 {
		return &b
	}
	return a
}

// OpenJournal returns the journal of table for src. Table, topic must consist
// of [A-Za-z0-9._-]. Nothing is read until Claim.
func OpenJournal(store checkpoint.Storage, table string, src Source) (*Journal, error) {
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
		prefix:   fmt.Sprintf("%s%s/%s/%d/", JournalPrefix, table, src.Topic, src.Partition),
		table:    table,
		src:      src,
		instance: hex.EncodeToString(id[:]),
	}, nil
}

// Instance returns this journal handle's random instance id.
func (j *Journal) Instance() string { return j.instance }

// Epoch returns the epoch claimed by Claim, 0 before.
func (j *Journal) Epoch() uint64 { return j.epoch }

// Claim makes this instance the owner: it raises the owner epoch by one.
// Every earlier owner's Record fails with ErrFenced from then on.
func (j *Journal) Claim(ctx context.Context) error {
	var rec ownerRecord
	b, err := j.store.Get(ctx, j.prefix+"owner")
	switch {
	case errors.Is(err, checkpoint.ErrNotFound):
		var inc [8]byte
		_, _ = rand.Read(inc[:])
		rec.Incarnation = hex.EncodeToString(inc[:])
	case err != nil:
		return fmt.Errorf("sink: journal %s: read owner: %w", j.prefix, err)
	default:
		if err := json.Unmarshal(b, &rec); err != nil {
			return fmt.Errorf("%w: owner record: %v", ErrJournalCorrupt, err)
		}
	}
	rec.Epoch++
	rec.Owner = j.instance
	out, _ := json.Marshal(rec)
	if err := j.store.Put(ctx, j.prefix+"owner", out); err != nil {
		return fmt.Errorf("sink: journal %s: claim: %w", j.prefix, err)
	}
	j.epoch = rec.Epoch
	j.incarnation = rec.Incarnation
	// Acks noted in the previous epoch name positions that the new epoch
	// may cut again; carried into it they would acknowledge its batches
	// before they are inserted.
	j.ackedThrough = nil
	return nil
}

// Token returns the insert_deduplication_token of the batch [first, last].
// It depends only on the journal's incarnation (created with the journal, so
// a wiped journal never reuses an old token), the source and the positions.
func (j *Journal) Token(first, last Position) string {
	return fmt.Sprintf("eo1:%s:%s:%d:%s-%s", j.incarnation, j.src.Topic, j.src.Partition, first, last)
}

func (j *Journal) entryName(in Intent) string {
	return fmt.Sprintf("%sb-%020d-%010d-%020d", j.prefix, in.First.Offset, in.First.Index, in.Epoch)
}

// CheckOwner returns ErrFenced if another instance claimed the journal.
func (j *Journal) CheckOwner(ctx context.Context) error {
	b, err := j.store.Get(ctx, j.prefix+"owner")
	if err != nil {
		return fmt.Errorf("sink: journal %s: read owner: %w", j.prefix, err)
	}
	var rec ownerRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return fmt.Errorf("%w: owner record: %v", ErrJournalCorrupt, err)
	}
	if rec.Owner != j.instance {
		return fmt.Errorf("%w (%s: epoch %d owned by %s, this instance %s epoch %d)", ErrFenced, j.src, rec.Epoch, rec.Owner, j.instance, j.epoch)
	}
	return nil
}

// Record durably writes in as a new intent owned by this instance, then
// checks ownership. Only after Record returns nil may the batch be inserted.
// The intent also carries the acknowledgements noted by AckLater and the
// prune point noted by Prune.
//
// The ownership check re-reads the owner record after every intent, even
// when nothing seems to have changed: it is what orders this intent before
// any later Claim. If the read shows this instance still owner, the intent's
// Put happened before the new owner's Claim, so the new owner's Load, which
// follows its Claim, sees the intent and replays it with the same token; if
// the check were skipped, an intent written after a takeover could be
// inserted while the new owner, which never saw it, cuts the same positions
// differently: a duplicate. The read is a Get without fsync, a small part of
// a batch's cost; what Record saves is the separate ack and prune writes.
func (j *Journal) Record(ctx context.Context, in *Intent) error {
	if j.epoch == 0 {
		return errors.New("sink: journal: Record before Claim")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	in.Version = intentVersion
	in.Table, in.Topic, in.Partition = j.table, j.src.Topic, j.src.Partition
	in.Epoch, in.Owner = j.epoch, j.instance
	in.AckedThrough, in.PrunedThrough = j.ackedThrough, j.pruneWant
	b, _ := json.Marshal(in)
	name := j.entryName(*in)
	if err := j.store.Put(ctx, name, b); err != nil {
		return fmt.Errorf("sink: journal %s: record %s..%s: %w", j.prefix, in.First, in.Last, err)
	}
	j.known = append(j.known, entryRef{name: name, last: in.Last})
	if in.PrunedThrough != nil {
		j.pruneDurable = maxPos(j.pruneDurable, *in.PrunedThrough)
	}
	return j.CheckOwner(ctx)
}

// AckLater notes that ClickHouse acknowledged in, a batch recorded by this
// handle in its current epoch; the next Record carries the ack. Until then
// a replay re-inserts in with its token and ClickHouse drops it, like any
// batch whose ack was lost, so deferring the ack costs nothing in
// correctness, only (after a crash) one deduplicated re-insert that the
// deduplication window must cover, as it must the batch in flight.
func (j *Journal) AckLater(in *Intent) {
	if in.Epoch == j.epoch && in.Owner == j.instance {
		j.ackedThrough = maxPos(j.ackedThrough, in.Last)
	}
}

// Ack marks in as acknowledged by ClickHouse. Losing an ack is harmless: the
// batch is then re-inserted with its token on replay and deduplicated.
func (j *Journal) Ack(ctx context.Context, in *Intent) error {
	in.Acked, in.AckEpoch = true, j.epoch
	b, _ := json.Marshal(in)
	if err := j.store.Put(ctx, j.entryName(*in), b); err != nil {
		return fmt.Errorf("sink: journal %s: ack %s..%s: %w", j.prefix, in.First, in.Last, err)
	}
	return nil
}

// Load returns the entries whose last position is after `after` (all
// entries when after is nil), ordered by position. Overlapping entries are
// reconciled: an entry that supersedes another (same positions, Supersedes
// naming its token, newer epoch) replaces it, unless the superseded entry was
// acknowledged by a still newer epoch (then the superseding one was written
// by a fenced owner and never inserted); an unacknowledged entry of an older
// epoch that overlaps a newer epoch's entry was written by a fenced owner
// after the takeover and never inserted, so it is dropped; any other overlap
// is ErrJournalCorrupt. An unacknowledged entry that spans after (starts at or
// before it, ends past it) is dropped too: only a fenced owner can have
// written it, since a checkpoint never falls inside a batch of its own
// lineage.
func (j *Journal) Load(ctx context.Context, after *Position) ([]Intent, error) {
	names, err := j.store.List(ctx, j.prefix+"b-")
	if err != nil {
		return nil, fmt.Errorf("sink: journal %s: list: %w", j.prefix, err)
	}
	var all []Intent
	known := j.known[:0]
	for _, name := range names {
		b, err := j.store.Get(ctx, name)
		if errors.Is(err, checkpoint.ErrNotFound) {
			continue // pruned concurrently
		}
		if err != nil {
			return nil, fmt.Errorf("sink: journal %s: read %s: %w", j.prefix, name, err)
		}
		var in Intent
		if err := json.Unmarshal(b, &in); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrJournalCorrupt, name, err)
		}
		if in.Version != intentVersion || in.Last.Compare(in.First) < 0 {
			return nil, fmt.Errorf("%w: %s: version %d, range %s..%s", ErrJournalCorrupt, name, in.Version, in.First, in.Last)
		}
		known = append(known, entryRef{name: name, last: in.Last})
		if in.PrunedThrough != nil {
			j.pruneDurable = maxPos(j.pruneDurable, *in.PrunedThrough)
		}
		all = append(all, in)
	}
	j.known = known
	if j.pruneDurable != nil {
		j.pruneWant = maxPos(j.pruneWant, *j.pruneDurable) // keep it alive in the next intent
	}
	// Acks carried by later intents of the same epoch and owner. Only
	// entries that end before the carrier begins: an intent never
	// acknowledges itself or a batch cut over its own positions.
	for i := range all {
		a := &all[i]
		if a.AckedThrough == nil {
			continue
		}
		for k := range all {
			e := &all[k]
			if !e.Acked && e.Epoch == a.Epoch && e.Owner == a.Owner &&
				e.Last.Compare(*a.AckedThrough) <= 0 && e.Last.Compare(a.First) < 0 {
				e.Acked, e.AckEpoch = true, e.Epoch
			}
		}
	}
	all = slices.DeleteFunc(all, func(in Intent) bool {
		if after == nil {
			return false
		}
		if in.Last.Compare(*after) <= 0 {
			return true // durable before the restore point
		}
		// An unacknowledged batch across the restore point was written by an
		// owner already fenced, and never inserted: no checkpoint falls inside
		// a batch of the lineage that took it (Snapshot flushes, and a
		// barrier inside a batch being replayed is declined), and a batch
		// journaled before that lineage's Claim was loaded and replayed
		// whole by it. Replaying it would cut the rows differently and stop
		// the sink on every restart.
		return !in.Acked && in.First.Compare(*after) <= 0
	})
	slices.SortFunc(all, func(a, b Intent) int {
		if c := a.First.Compare(b.First); c != 0 {
			return c
		}
		return cmp.Compare(a.Epoch, b.Epoch)
	})
	out := all[:0]
	for _, in := range all {
		if n := len(out); n > 0 && in.First.Compare(out[n-1].Last) <= 0 {
			prev := out[n-1]
			switch {
			case supersedes(in, prev) && !(prev.Acked && prev.AckEpoch > in.Epoch):
				out[n-1] = in
			case supersedes(in, prev) && !in.Acked:
				// Written by an owner fenced before the superseded batch was
				// acknowledged by a later one: never inserted.
			case prev.Epoch < in.Epoch && !prev.Acked:
				out[n-1] = in
			case in.Epoch < prev.Epoch && !in.Acked:
			default:
				return nil, fmt.Errorf("%w: overlapping batches %s..%s (epoch %d) and %s..%s (epoch %d)",
					ErrJournalCorrupt, prev.First, prev.Last, prev.Epoch, in.First, in.Last, in.Epoch)
			}
			continue
		}
		out = append(out, in)
	}
	return out, nil
}

func supersedes(in, prev Intent) bool {
	return in.Supersedes != "" && in.Supersedes == prev.Token && in.Epoch > prev.Epoch &&
		in.First == prev.First && in.Last == prev.Last
}

// Prune notes through, the position covered by a completed checkpoint, as
// the journal's prune point, and deletes the entries that end at or before
// the prune point already made durable. The point is not written on its own:
// the next Record carries it, and only entries at or before a point carried
// by a durable intent are deleted, so a later restore from a checkpoint
// older than a deletion still fails with ErrStaleCheckpoint (see Pruned).
// The newest intent is never deleted (it ends after the point it carries),
// and a new owner's first intent carries the point it loaded, so the point
// outlives the entries it pruned. Pruning is an optimisation: a crash midway
// leaves entries that Load filters by position anyway. Prune is one step
// per checkpoint: no reads, one Delete per entry.
func (j *Journal) Prune(ctx context.Context, through Position) error {
	j.pruneWant = maxPos(j.pruneWant, through)
	if j.pruneDurable == nil {
		return nil
	}
	keep := j.known[:0]
	var err error
	for _, e := range j.known {
		if err == nil && e.last.Compare(*j.pruneDurable) <= 0 {
			if err = j.store.Delete(ctx, e.name); err == nil {
				continue
			}
			err = fmt.Errorf("sink: journal %s: delete %s: %w", j.prefix, e.name, err)
		}
		keep = append(keep, e)
	}
	j.known = keep
	return err
}

// Pruned returns the journal's durable prune point, if any: the highest
// prune point carried by an entry (or by the record that older versions
// wrote). Entries that end at or before it may have been deleted.
func (j *Journal) Pruned(ctx context.Context) (Position, bool, error) {
	var through *Position
	b, err := j.store.Get(ctx, j.prefix+"pruned")
	switch {
	case errors.Is(err, checkpoint.ErrNotFound):
	case err != nil:
		return Position{}, false, fmt.Errorf("sink: journal %s: read prune point: %w", j.prefix, err)
	default:
		var rec pruneRecord
		if err := json.Unmarshal(b, &rec); err != nil {
			return Position{}, false, fmt.Errorf("%w: prune record: %v", ErrJournalCorrupt, err)
		}
		through = &rec.Through
	}
	names, err := j.store.List(ctx, j.prefix+"b-")
	if err != nil {
		return Position{}, false, fmt.Errorf("sink: journal %s: list: %w", j.prefix, err)
	}
	for _, name := range names {
		b, err := j.store.Get(ctx, name)
		if errors.Is(err, checkpoint.ErrNotFound) {
			continue
		}
		if err != nil {
			return Position{}, false, fmt.Errorf("sink: journal %s: read %s: %w", j.prefix, name, err)
		}
		var in Intent
		if err := json.Unmarshal(b, &in); err != nil {
			return Position{}, false, fmt.Errorf("%w: %s: %v", ErrJournalCorrupt, name, err)
		}
		if in.PrunedThrough != nil {
			through = maxPos(through, *in.PrunedThrough)
		}
	}
	if through == nil {
		return Position{}, false, nil
	}
	return *through, true, nil
}
