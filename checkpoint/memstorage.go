package checkpoint

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// MemoryStorage is an in-memory Storage for tests and examples. Its content
// lives as long as the value: it survives nothing.
//
// Its Versions come from a counter, so every write, even of the same bytes,
// gets a new Version.
type MemoryStorage struct {
	mu    sync.Mutex
	blobs map[string]memBlob
	seq   uint64 // the last Version handed out
}

type memBlob struct {
	data    []byte
	version Version
}

var (
	_ Storage      = (*MemoryStorage)(nil)
	_ StreamPutter = (*MemoryStorage)(nil)
)

// NewMemoryStorage returns an empty MemoryStorage.
func NewMemoryStorage() *MemoryStorage {
	return &MemoryStorage{blobs: map[string]memBlob{}}
}

func (s *MemoryStorage) check(ctx context.Context, op, name string) error {
	if !ValidName(name) {
		return fmt.Errorf("checkpoint: %s %q: %w", op, name, ErrInvalidName)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("checkpoint: %s %q: %w", op, name, err)
	}
	return nil
}

// store keeps a copy of data under name; s.mu is held.
func (s *MemoryStorage) store(name string, data []byte) Version {
	v := s.nextVersion()
	s.blobs[name] = memBlob{data: append([]byte(nil), data...), version: v}
	return v
}

// nextVersion hands out a new Version; s.mu is held.
func (s *MemoryStorage) nextVersion() Version {
	s.seq++
	return Version(strconv.FormatUint(s.seq, 10))
}

// Put implements Storage. It keeps a copy of data.
func (s *MemoryStorage) Put(ctx context.Context, name string, data []byte) error {
	if err := s.check(ctx, "put", name); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.store(name, data)
	return nil
}

// PutStream implements StreamPutter: it collects what write writes, then
// stores it as Put does. An error from write stores nothing.
func (s *MemoryStorage) PutStream(ctx context.Context, name string, write func(w io.Writer) error) error {
	if err := s.check(ctx, "put", name); err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := write(&buf); err != nil {
		return fmt.Errorf("checkpoint: put %q: %w", name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.blobs[name] = memBlob{data: buf.Bytes(), version: s.nextVersion()}
	return nil
}

// Get implements Storage. It returns a copy.
func (s *MemoryStorage) Get(ctx context.Context, name string) ([]byte, error) {
	data, _, err := s.getVersion(ctx, "get", name)
	return data, err
}

// GetVersion implements Storage. It returns a copy.
func (s *MemoryStorage) GetVersion(ctx context.Context, name string) ([]byte, Version, error) {
	return s.getVersion(ctx, "get", name)
}

func (s *MemoryStorage) getVersion(ctx context.Context, op, name string) ([]byte, Version, error) {
	if err := s.check(ctx, op, name); err != nil {
		return nil, "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.blobs[name]
	if !ok {
		return nil, "", fmt.Errorf("checkpoint: %s %q: %w", op, name, ErrNotFound)
	}
	return append([]byte(nil), b.data...), b.version, nil
}

// Create implements Storage. It keeps a copy of data.
func (s *MemoryStorage) Create(ctx context.Context, name string, data []byte) (Version, error) {
	if err := s.check(ctx, "create", name); err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.blobs[name]; ok {
		return "", fmt.Errorf("checkpoint: create %q: %w", name, ErrConflict)
	}
	return s.store(name, data), nil
}

// Replace implements Storage. It keeps a copy of data.
func (s *MemoryStorage) Replace(ctx context.Context, name string, data []byte, v Version) (Version, error) {
	if err := s.check(ctx, "replace", name); err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.blobs[name]
	if !ok || v == "" || b.version != v {
		return "", fmt.Errorf("checkpoint: replace %q: %w", name, ErrConflict)
	}
	return s.store(name, data), nil
}

// List implements Storage.
func (s *MemoryStorage) List(ctx context.Context, prefix string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("checkpoint: list %q: %w", prefix, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for name := range s.blobs {
		if strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names, nil
}

// Delete implements Storage.
func (s *MemoryStorage) Delete(ctx context.Context, name string) error {
	if err := s.check(ctx, "delete", name); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.blobs, name)
	return nil
}

// MemStorage is MemoryStorage.
//
// Deprecated: use MemoryStorage, named as idempotency.MemoryStore is.
type MemStorage = MemoryStorage

// NewMemStorage returns an empty MemoryStorage.
//
// Deprecated: use NewMemoryStorage.
func NewMemStorage() *MemoryStorage { return NewMemoryStorage() }
