package idempotency

import (
	"container/heap"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"
)

// DefaultMaxKeys is the default bound of a MemoryStore.
const DefaultMaxKeys = 100_000

// MemoryOptions configures a MemoryStore. The zero value is valid.
type MemoryOptions struct {
	// MaxKeys bounds the number of keys held, pending and done together.
	// Default DefaultMaxKeys. When the store is full, Claim evicts the done
	// key closest to expiry; a duplicate of an evicted key is then published
	// again, which the downstream deduplicator drops. Pending keys are never
	// evicted: with MaxKeys pending keys, Claim returns ErrStoreFull. Each
	// key costs about 200 bytes plus its key, fingerprint and response body.
	MaxKeys int

	// Now is the clock that expires keys. Default time.Now.
	Now func() time.Time
}

// MemoryStore is a Store in process memory: the embedded default. It is
// bounded, expires keys lazily on each call (so it runs no goroutine and
// needs no Close), and is safe for concurrent use.
//
// It is only as durable as the process: after a restart every key is absent,
// so a duplicate of an event published before the restart is published
// again. That is an at-least-once outcome the downstream deduplicator
// absorbs, never a loss.
type MemoryStore struct {
	maxKeys int
	now     func() time.Time

	mu      sync.Mutex
	keys    map[string]*memEntry
	pending expiryHeap
	done    expiryHeap
}

var (
	_ Store    = (*MemoryStore)(nil)
	_ Extender = (*MemoryStore)(nil)
)

type memEntry struct {
	key     string
	fp      string
	token   string
	done    bool
	resp    Response
	expires time.Time
	index   int // position in its heap
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore(opts MemoryOptions) (*MemoryStore, error) {
	if opts.MaxKeys < 0 {
		return nil, fmt.Errorf("%w: MaxKeys %d is negative", ErrInvalidOptions, opts.MaxKeys)
	}
	if opts.MaxKeys == 0 {
		opts.MaxKeys = DefaultMaxKeys
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &MemoryStore{
		maxKeys: opts.MaxKeys,
		now:     opts.Now,
		keys:    make(map[string]*memEntry),
	}, nil
}

// Len returns the number of keys held, pending and done.
func (s *MemoryStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire(s.now())
	return len(s.keys)
}

// Claim implements Store.
func (s *MemoryStore) Claim(ctx context.Context, key, fingerprint string, ttl time.Duration) (Claim, error) {
	if err := CheckClaimArgs(key, ttl); err != nil {
		return Claim{}, err
	}
	if err := ctx.Err(); err != nil {
		return Claim{}, err
	}
	token, err := newToken()
	if err != nil {
		return Claim{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.expire(now)
	if e, ok := s.keys[key]; ok {
		switch {
		case e.fp != fingerprint:
			return Claim{}, ErrFingerprintMismatch
		case e.done:
			return Claim{}, &DoneError{Record: Record{Key: key, Fingerprint: e.fp, Response: copyResponse(e.resp)}}
		default:
			return Claim{}, ErrPending
		}
	}
	if len(s.keys) >= s.maxKeys {
		if s.done.Len() == 0 {
			return Claim{}, ErrStoreFull
		}
		e := heap.Pop(&s.done).(*memEntry)
		delete(s.keys, e.key)
	}
	e := &memEntry{key: key, fp: fingerprint, token: token, expires: now.Add(ttl)}
	s.keys[key] = e
	heap.Push(&s.pending, e)
	return Claim{Key: key, Token: token, Fingerprint: fingerprint}, nil
}

// Complete implements Store.
func (s *MemoryStore) Complete(ctx context.Context, c Claim, resp Response, ttl time.Duration) error {
	if err := CheckClaimArgs(c.Key, ttl); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	e, err := s.held(now, c)
	if err != nil {
		return err
	}
	heap.Remove(&s.pending, e.index)
	e.done = true
	e.resp = copyResponse(resp)
	e.expires = now.Add(ttl)
	heap.Push(&s.done, e)
	return nil
}

// Release implements Store.
func (s *MemoryStore) Release(ctx context.Context, c Claim) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, err := s.held(s.now(), c)
	if err != nil {
		return err
	}
	heap.Remove(&s.pending, e.index)
	delete(s.keys, c.Key)
	return nil
}

// Extend implements Extender.
func (s *MemoryStore) Extend(ctx context.Context, c Claim, ttl time.Duration) error {
	if err := CheckClaimArgs(c.Key, ttl); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	e, err := s.held(now, c)
	if err != nil {
		return err
	}
	e.expires = now.Add(ttl)
	heap.Fix(&s.pending, e.index)
	return nil
}

// held returns the pending entry of c.Key if it still holds c.
func (s *MemoryStore) held(now time.Time, c Claim) (*memEntry, error) {
	s.expire(now)
	e, ok := s.keys[c.Key]
	if !ok || e.done || e.token != c.Token || c.Token == "" {
		return nil, ErrClaimLost
	}
	return e, nil
}

// expire drops every key whose TTL ran out by now. Each key is dropped once,
// so the cost is amortised over the calls that inserted them.
func (s *MemoryStore) expire(now time.Time) {
	for _, h := range []*expiryHeap{&s.pending, &s.done} {
		for h.Len() > 0 && !(*h)[0].expires.After(now) {
			e := heap.Pop(h).(*memEntry)
			delete(s.keys, e.key)
		}
	}
}

func copyResponse(r Response) Response {
	if r.Body != nil {
		r.Body = append([]byte(nil), r.Body...)
	}
	return r
}

func newToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("idempotency: token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// expiryHeap orders entries by expiry, earliest first.
type expiryHeap []*memEntry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expires.Before(h[j].expires) }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *expiryHeap) Push(x any) {
	e := x.(*memEntry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *expiryHeap) Pop() any {
	old := *h
	n := len(old)
	e := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	return e
}
