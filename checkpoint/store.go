package checkpoint

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Defaults for StoreOptions.
const (
	DefaultPrefix = "checkpoints"
	DefaultKeep   = 3
)

// StoreOptions configures a Store. The zero value is valid.
type StoreOptions struct {
	// Prefix is the Storage name prefix of every checkpoint, so several jobs
	// can share one Storage. Default: DefaultPrefix.
	Prefix string
	// Keep is how many completed checkpoints are kept per partition; older
	// ones are deleted after every Save, except the saved checkpoint's
	// parent (Checkpoint.Parent: the newest one whose output is confirmed
	// intact), which is kept too wherever it sorts. Keeping more than one
	// lets restore fall back past a corrupt newest checkpoint. Default:
	// DefaultKeep.
	Keep int
	// Logger receives the reasons why restore skipped a checkpoint and
	// failures to delete old ones. Default: discard.
	Logger *slog.Logger
}

// Store lays checkpoints out in a Storage: one file per partition and
// checkpoint,
//
//	<prefix>/<topic>/<partition>/<id, 20 digits>-<generation, 10 digits>.ckpt
//
// so the owner of a partition finds that partition's newest checkpoint with
// one List of its own directory, whichever instance wrote it. Store is safe
// for concurrent use.
type Store struct {
	storage Storage
	prefix  string
	keep    int
	log     *slog.Logger

	mu   sync.Mutex
	refs map[string][]string // checkpoint name -> its Objects, for those read or written
}

// NewStore returns a Store over storage.
func NewStore(storage Storage, opts StoreOptions) (*Store, error) {
	if storage == nil {
		return nil, fmt.Errorf("%w: NewStore: nil Storage", ErrInvalidOptions)
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if !ValidName(opts.Prefix) {
		return nil, fmt.Errorf("%w: NewStore: prefix %q: %w", ErrInvalidOptions, opts.Prefix, ErrInvalidName)
	}
	if opts.Keep == 0 {
		opts.Keep = DefaultKeep
	}
	if opts.Keep < 0 {
		return nil, fmt.Errorf("%w: NewStore: Keep %d is negative", ErrInvalidOptions, opts.Keep)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Store{storage: storage, prefix: opts.Prefix, keep: opts.Keep, log: opts.Logger, refs: map[string][]string{}}, nil
}

func (s *Store) dir(p TopicPartition) (string, error) {
	d := s.prefix + "/" + p.Topic + "/" + strconv.Itoa(p.Partition) + "/"
	if p.Partition < 0 || !ValidName(d[:len(d)-1]) {
		return "", fmt.Errorf("checkpoint: partition %s: %w", p, ErrInvalidName)
	}
	return d, nil
}

// Name returns the Storage name of a checkpoint.
func (s *Store) Name(cp *Checkpoint) (string, error) {
	d, err := s.dir(cp.Partition)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s%020d-%010d.ckpt", d, uint64(cp.ID), max(cp.Generation, 0)), nil
}

type entry struct {
	name string
	id   uint64
	gen  int64
}

// entries lists a partition's checkpoint names, newest first.
func (s *Store) entries(ctx context.Context, p TopicPartition) ([]entry, error) {
	d, err := s.dir(p)
	if err != nil {
		return nil, err
	}
	names, err := s.storage.List(ctx, d)
	if err != nil {
		return nil, err
	}
	var out []entry
	for _, n := range names {
		base, ok := strings.CutSuffix(n[len(d):], ".ckpt")
		idStr, genStr, ok2 := strings.Cut(base, "-")
		if !ok || !ok2 {
			continue // not ours (a sink journal beside it): leave alone
		}
		id, err1 := strconv.ParseUint(idStr, 10, 64)
		gen, err2 := strconv.ParseInt(genStr, 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, entry{name: n, id: id, gen: gen})
	}
	slices.SortFunc(out, func(a, b entry) int {
		if c := cmp.Compare(b.id, a.id); c != 0 {
			return c
		}
		return cmp.Compare(b.gen, a.gen)
	})
	return out, nil
}

// Save writes cp atomically, then deletes the partition's checkpoints beyond
// the newest Keep, except cp's parent (Checkpoint.Parent). When Save returns nil the checkpoint is durable. When it
// returns an error the checkpoint may or may not have been stored (the
// Storage's outcome may be unknown); either way a later restore finds a
// consistent checkpoint, this one or an earlier one.
//
// The file is streamed to a Storage that is a StreamPutter (EncodeTo), so
// the participants' states are not copied into one file-sized buffer.
//
// Save refuses, with an error wrapping ErrSuperseded and writing nothing,
// a checkpoint whose partition holds one of a later generation with an ID
// above cp.Parent: a later owner took the partition over (see
// ErrSuperseded; a Task's save checks from the checkpoint it restored).
// That check lists the partition before the write, so a write racing the
// later owner's first one can still land; restore skips it (see Latest).
//
// Failing to delete old checkpoints is logged, not returned: it loses
// nothing. Save does not delete objects (see ObjectParticipant): the
// Coordinator does, after the checkpoint completed.
func (s *Store) Save(ctx context.Context, cp *Checkpoint) (size int, err error) {
	return s.save(ctx, cp, cp.Parent, nil)
}

// save is Save for a chain that restored start (0: it started fresh); the
// checkpoints named in known (those its Attach saw, and passed over) do
// not refuse it.
func (s *Store) save(ctx context.Context, cp *Checkpoint, start ID, known map[string]bool) (size int, err error) {
	name, err := s.Name(cp)
	if err != nil {
		return 0, err
	}
	if err := s.checkOwner(ctx, cp, start, known); err != nil {
		return 0, err
	}
	for _, o := range cp.Objects {
		if !ValidName(o) {
			return 0, fmt.Errorf("checkpoint: object %q: %w", o, ErrInvalidName)
		}
	}
	var n int64
	err = PutStream(ctx, s.storage, name, func(w io.Writer) error {
		var err error
		n, err = EncodeTo(w, cp)
		return err
	})
	if err != nil {
		return 0, err
	}
	s.remember(name, cp.Objects)
	s.prune(ctx, cp.Partition, cp.Parent)
	return int(n), nil
}

// retained splits es (newest first) into the checkpoints retention keeps
// and those it deletes: the newest Keep, and every file of checkpoint
// parent (the newest checkpoint whose output is confirmed intact, see
// Checkpoint.Parent) wherever it sorts. Without the parent, Keep
// newer checkpoints whose output was then lost (retries of one
// checkpoint under several generations, each aborted) would push the
// last good one out, and no restore could fall back to it.
func (s *Store) retained(es []entry, parent ID) (keep, drop []entry) {
	for i, e := range es {
		if i < s.keep || parent != 0 && e.id == uint64(parent) {
			keep = append(keep, e)
		} else {
			drop = append(drop, e)
		}
	}
	return keep, drop
}

func (s *Store) remember(name string, objects []string) {
	s.mu.Lock()
	s.refs[name] = objects
	s.mu.Unlock()
}

func (s *Store) prune(ctx context.Context, p TopicPartition, parent ID) {
	es, err := s.entries(ctx, p)
	if err != nil {
		s.log.WarnContext(ctx, "checkpoint: listing old checkpoints failed", "partition", p.String(), "err", err)
		return
	}
	_, drop := s.retained(es, parent)
	for _, e := range drop {
		if err := s.storage.Delete(ctx, e.name); err != nil {
			s.log.WarnContext(ctx, "checkpoint: deleting old checkpoint failed", "name", e.name, "err", err)
			continue
		}
		s.mu.Lock()
		delete(s.refs, e.name)
		s.mu.Unlock()
	}
}

// collectObjects deletes the partition's objects that none of the
// retained checkpoints (the newest Keep and parent, see retained)
// references and that spare does not protect (objects written for a
// checkpoint not saved yet). A checkpoint it cannot read stops the
// collection (nothing is deleted): it may reference anything. Failures
// are logged: an object left behind is only garbage.
func (s *Store) collectObjects(ctx context.Context, p TopicPartition, parent ID, spare func(ref string) bool) {
	d, err := s.dir(p)
	if err != nil {
		return
	}
	names, err := s.storage.List(ctx, d+objectsDir)
	if err != nil {
		s.log.WarnContext(ctx, "checkpoint: listing objects failed", "partition", p.String(), "err", err)
		return
	}
	if len(names) == 0 {
		return // participants that write no objects cost one List
	}
	es, err := s.entries(ctx, p)
	if err != nil {
		s.log.WarnContext(ctx, "checkpoint: listing checkpoints for object collection failed", "partition", p.String(), "err", err)
		return
	}
	live := map[string]bool{}
	keep, _ := s.retained(es, parent)
	for _, e := range keep {
		s.mu.Lock()
		refs, ok := s.refs[e.name]
		s.mu.Unlock()
		if !ok {
			data, err := s.storage.Get(ctx, e.name)
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if err != nil {
				s.log.WarnContext(ctx, "checkpoint: reading checkpoint for object collection failed", "name", e.name, "err", err)
				return
			}
			cp, err := Decode(data)
			if err != nil {
				// Never restorable (Latest skips it): it keeps nothing alive.
				continue
			}
			refs = cp.Objects
			s.remember(e.name, refs)
		}
		for _, r := range refs {
			live[r] = true
		}
	}
	for _, n := range names {
		ref := n[len(d+objectsDir):]
		if live[ref] || spare(ref) {
			continue
		}
		if err := s.storage.Delete(ctx, n); err != nil {
			s.log.WarnContext(ctx, "checkpoint: deleting unreferenced object failed", "name", n, "err", err)
		}
	}
}

// missingObject returns the first of refs that is not among the stored
// objects of the partition (listed once, into *have), or "".
func (s *Store) missingObject(ctx context.Context, p TopicPartition, refs []string, have *map[string]bool) (string, error) {
	if len(refs) == 0 {
		return "", nil
	}
	d, err := s.dir(p)
	if err != nil {
		return "", err
	}
	if *have == nil {
		names, err := s.storage.List(ctx, d+objectsDir)
		if err != nil {
			return "", err
		}
		*have = make(map[string]bool, len(names))
		for _, n := range names {
			(*have)[n[len(d+objectsDir):]] = true
		}
	}
	for _, r := range refs {
		if !(*have)[r] {
			return r, nil
		}
	}
	return "", nil
}

// Latest returns the partition's newest checkpoint that reads back intact.
// It skips a corrupt or foreign checkpoint (for another partition), one
// naming an object (Checkpoint.Objects) that is not stored, and one a
// revoked owner saved after a later owner's checkpoint (one of a later
// generation with an ID above the start of its lineage and not above its
// own, see ErrSuperseded), with a logged reason, and falls back to the one
// before.
// Without any intact checkpoint it returns an error wrapping ErrNotFound.
func (s *Store) Latest(ctx context.Context, p TopicPartition) (*Checkpoint, error) {
	cp, _, _, err := s.latestBefore(ctx, p, nil)
	return cp, err
}

// latestBefore is Latest among the checkpoints that sort after before
// (older ones), or among all with a nil before; it also returns the
// checkpoint's entry, for the next call, and the names listed.
func (s *Store) latestBefore(ctx context.Context, p TopicPartition, before *entry) (*Checkpoint, *entry, map[string]bool, error) {
	es, err := s.entries(ctx, p)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("checkpoint: restore %s: %w", p, err)
	}
	listed := make(map[string]bool, len(es))
	for _, e := range es {
		listed[e.name] = true
	}
	cp, e, err := s.newestOf(ctx, p, es, before)
	return cp, e, listed, err
}

// newestOf is latestBefore over the entries es.
func (s *Store) newestOf(ctx context.Context, p TopicPartition, es []entry, before *entry) (*Checkpoint, *entry, error) {
	var have map[string]bool // the partition's objects, listed when first needed
	for _, e := range es {
		if before != nil && (e.id > before.id || e.id == before.id && e.gen >= before.gen) {
			continue
		}
		data, err := s.storage.Get(ctx, e.name)
		if errors.Is(err, ErrNotFound) {
			continue // pruned meanwhile by a later Save
		}
		if err != nil {
			return nil, nil, fmt.Errorf("checkpoint: restore %s: %w", p, err)
		}
		cp, err := Decode(data)
		if err == nil && (cp.Partition != p || uint64(cp.ID) != e.id) {
			err = fmt.Errorf("%w: holds %s checkpoint %d", ErrCorrupt, cp.Partition, cp.ID)
		}
		if err != nil {
			s.log.WarnContext(ctx, "checkpoint: skipping unreadable checkpoint", "name", e.name, "reason", err)
			continue
		}
		missing, err := s.missingObject(ctx, p, cp.Objects, &have)
		if err != nil {
			return nil, nil, fmt.Errorf("checkpoint: restore %s: %w", p, err)
		}
		if missing != "" {
			s.log.WarnContext(ctx, "checkpoint: skipping checkpoint whose object is missing", "name", e.name, "object", missing)
			continue
		}
		// Only when a later generation's checkpoint sorts below it at all
		// (rare) is its lineage read, a Get of each ancestor.
		if _, later := supersededBy(es, e.gen, 0, e.id, nil); later && !cp.ParentUnknown {
			start := s.lineageStart(ctx, es, e, cp)
			if d, ok := supersededBy(es, e.gen, start, e.id, nil); ok {
				s.log.WarnContext(ctx, "checkpoint: skipping checkpoint a revoked owner saved after a later owner's",
					"name", e.name, "generation", e.gen, "lineage_start", start, "later", d.name)
				continue
			}
		}
		s.remember(e.name, cp.Objects)
		return cp, &e, nil
	}
	return nil, nil, fmt.Errorf("checkpoint: restore %s: %w", p, ErrNotFound)
}

// List returns the IDs of the partition's stored checkpoints, newest first,
// without reading them.
func (s *Store) List(ctx context.Context, p TopicPartition) ([]ID, error) {
	es, err := s.entries(ctx, p)
	if err != nil {
		return nil, err
	}
	ids := make([]ID, len(es))
	for i, e := range es {
		ids[i] = ID(e.id)
	}
	return ids, nil
}
