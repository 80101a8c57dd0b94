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
// the insert; Acked is set by a second write once ClickHouse acknowledged it.
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
// A Journal is used by one goroutine at a time.
type Journal struct {
	store       checkpoint.Storage
	prefix      string
	table       string
	src         Source
	instance    string
	epoch       uint64
	incarnation string
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
	b, _ := json.Marshal(in)
	if err := j.store.Put(ctx, j.entryName(*in), b); err != nil {
		return fmt.Errorf("sink: journal %s: record %s..%s: %w", j.prefix, in.First, in.Last, err)
	}
	return j.CheckOwner(ctx)
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
// is ErrJournalCorrupt.
func (j *Journal) Load(ctx context.Context, after *Position) ([]Intent, error) {
	names, err := j.store.List(ctx, j.prefix+"b-")
	if err != nil {
		return nil, fmt.Errorf("sink: journal %s: list: %w", j.prefix, err)
	}
	var all []Intent
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
		if after != nil && in.Last.Compare(*after) <= 0 {
			continue
		}
		all = append(all, in)
	}
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

// Prune deletes the entries that end at or before through, after recording
// through as the prune point. Pruning is an optimisation: a crash midway
// leaves entries that Load filters by position anyway.
func (j *Journal) Prune(ctx context.Context, through Position) error {
	if prev, ok, err := j.Pruned(ctx); err != nil {
		return err
	} else if ok && through.Compare(prev) <= 0 {
		return nil
	}
	b, _ := json.Marshal(pruneRecord{Through: through})
	if err := j.store.Put(ctx, j.prefix+"pruned", b); err != nil {
		return fmt.Errorf("sink: journal %s: prune: %w", j.prefix, err)
	}
	entries, err := j.store.List(ctx, j.prefix+"b-")
	if err != nil {
		return fmt.Errorf("sink: journal %s: list: %w", j.prefix, err)
	}
	for _, name := range entries {
		var off, idx, ep uint64
		if _, err := fmt.Sscanf(strings.TrimPrefix(name, j.prefix), "b-%d-%d-%d", &off, &idx, &ep); err != nil {
			continue
		}
		b, err := j.store.Get(ctx, name)
		if err != nil {
			continue
		}
		var in Intent
		if json.Unmarshal(b, &in) != nil || in.Last.Compare(through) > 0 {
			continue
		}
		if err := j.store.Delete(ctx, name); err != nil {
			return fmt.Errorf("sink: journal %s: delete %s: %w", j.prefix, name, err)
		}
	}
	return nil
}

// Pruned returns the journal's prune point, if any.
func (j *Journal) Pruned(ctx context.Context) (Position, bool, error) {
	b, err := j.store.Get(ctx, j.prefix+"pruned")
	if errors.Is(err, checkpoint.ErrNotFound) {
		return Position{}, false, nil
	}
	if err != nil {
		return Position{}, false, fmt.Errorf("sink: journal %s: read prune point: %w", j.prefix, err)
	}
	var rec pruneRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return Position{}, false, fmt.Errorf("%w: prune record: %v", ErrJournalCorrupt, err)
	}
	return rec.Through, true, nil
}
