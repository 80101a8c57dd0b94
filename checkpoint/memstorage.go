package checkpoint

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// MemStorage is an in-memory Storage for tests and examples. Its content
// lives as long as the value: it survives nothing.
type MemStorage struct {
	mu    sync.Mutex
	blobs map[string][]byte
}

var _ Storage = (*MemStorage)(nil)

// NewMemStorage returns an empty MemStorage.
func NewMemStorage() *MemStorage {
	return &MemStorage{blobs: map[string][]byte{}}
}

// Put implements Storage. It keeps a copy of data.
func (s *MemStorage) Put(ctx context.Context, name string, data []byte) error {
	if !ValidName(name) {
		return fmt.Errorf("checkpoint: put %q: %w", name, ErrInvalidName)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("checkpoint: put %q: %w", name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.blobs[name] = append([]byte(nil), data...)
	return nil
}

// Get implements Storage. It returns a copy.
func (s *MemStorage) Get(ctx context.Context, name string) ([]byte, error) {
	if !ValidName(name) {
		return nil, fmt.Errorf("checkpoint: get %q: %w", name, ErrInvalidName)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("checkpoint: get %q: %w", name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	data, ok := s.blobs[name]
	if !ok {
		return nil, fmt.Errorf("checkpoint: get %q: %w", name, ErrNotFound)
	}
	return append([]byte(nil), data...), nil
}

// List implements Storage.
func (s *MemStorage) List(ctx context.Context, prefix string) ([]string, error) {
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
func (s *MemStorage) Delete(ctx context.Context, name string) error {
	if !ValidName(name) {
		return fmt.Errorf("checkpoint: delete %q: %w", name, ErrInvalidName)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("checkpoint: delete %q: %w", name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.blobs, name)
	return nil
}
