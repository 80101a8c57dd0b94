package checkpoint

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
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
	// ones are deleted after every Save. Keeping more than one lets restore
	// fall back past a corrupt newest checkpoint. Default: DefaultKeep.
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
	return &Store{storage: storage, prefix: opts.Prefix, keep: opts.Keep, log: opts.Logger}, nil
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
// the newest Keep. When Save returns nil the checkpoint is durable. When it
// returns an error the checkpoint may or may not have been stored (the
// Storage's outcome may be unknown); either way a later restore finds a
// consistent checkpoint, this one or an earlier one.
//
// Failing to delete old checkpoints is logged, not returned: it loses
// nothing.
func (s *Store) Save(ctx context.Context, cp *Checkpoint) (size int, err error) {
	name, err := s.Name(cp)
	if err != nil {
		return 0, err
	}
	data, err := Encode(cp)
	if err != nil {
		return 0, err
	}
	if err := s.storage.Put(ctx, name, data); err != nil {
		return 0, err
	}
	s.prune(ctx, cp.Partition)
	return len(data), nil
}

func (s *Store) prune(ctx context.Context, p TopicPartition) {
	es, err := s.entries(ctx, p)
	if err != nil {
		s.log.WarnContext(ctx, "checkpoint: listing old checkpoints failed", "partition", p.String(), "err", err)
		return
	}
	for _, e := range es[min(s.keep, len(es)):] {
		if err := s.storage.Delete(ctx, e.name); err != nil {
			s.log.WarnContext(ctx, "checkpoint: deleting old checkpoint failed", "name", e.name, "err", err)
		}
	}
}

// Latest returns the partition's newest checkpoint that reads back intact.
// It skips a corrupt or foreign checkpoint (for another partition) with a
// logged reason and falls back to the one before. Without any intact
// checkpoint it returns an error wrapping ErrNotFound.
func (s *Store) Latest(ctx context.Context, p TopicPartition) (*Checkpoint, error) {
	es, err := s.entries(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: restore %s: %w", p, err)
	}
	for _, e := range es {
		data, err := s.storage.Get(ctx, e.name)
		if errors.Is(err, ErrNotFound) {
			continue // pruned meanwhile by a later Save
		}
		if err != nil {
			return nil, fmt.Errorf("checkpoint: restore %s: %w", p, err)
		}
		cp, err := Decode(data)
		if err == nil && (cp.Partition != p || uint64(cp.ID) != e.id) {
			err = fmt.Errorf("%w: holds %s checkpoint %d", ErrCorrupt, cp.Partition, cp.ID)
		}
		if err != nil {
			s.log.WarnContext(ctx, "checkpoint: skipping unreadable checkpoint", "name", e.name, "reason", err)
			continue
		}
		return cp, nil
	}
	return nil, fmt.Errorf("checkpoint: restore %s: %w", p, ErrNotFound)
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
