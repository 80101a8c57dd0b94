package window

import (
	"errors"
	"fmt"
	"sync"
)

// ErrKeySplit reports a window key seen on two Kafka partitions. Window
// aggregates are kept per partition (each partition's chain has its own
// Operator), so the events of one key spread over two partitions give two
// partial rows for one window, each written as if it were whole. It is a
// configuration error of the producer's partition key, not of the data.
var ErrKeySplit = errors.New("window: key seen on two partitions")

// KeySplitError is the error of PartitionCheck.Check: Key was seen on
// partition First and now on Second. It wraps ErrKeySplit.
type KeySplitError struct {
	Key           string
	First, Second int
}

// Error implements error.
func (e *KeySplitError) Error() string {
	return fmt.Sprintf("window: key %q seen on partitions %d and %d: the producer's partition key must determine the window key, or windows are split into partial rows",
		e.Key, e.First, e.Second)
}

// Unwrap returns ErrKeySplit.
func (e *KeySplitError) Unwrap() error { return ErrKeySplit }

// PartitionCheck checks that every window key lives in one partition: it
// records the partition each key was first seen on and returns a
// *KeySplitError for a key seen on another. Call Check for every event
// before handing it to the Operator, and stop the chain on its error: a
// partial row is a silent wrong answer, a stopped chain a loud one.
//
// It sees the partitions of one process only: keys split between partitions
// that two processes consume are caught only when one process holds both
// (after a rebalance, or with one instance). Memory grows with the number of
// distinct keys; Forget drops keys that are no longer expected.
//
// A PartitionCheck is safe for concurrent use by the chains of every
// partition; its zero value is ready to use.
type PartitionCheck struct {
	mu   sync.Mutex
	seen map[string]int
}

// Check records that key was seen on partition, and fails with a
// *KeySplitError when it was seen on another partition before.
func (c *PartitionCheck) Check(key string, partition int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen = make(map[string]int)
	}
	first, ok := c.seen[key]
	if !ok {
		c.seen[key] = partition
		return nil
	}
	if first != partition {
		return &KeySplitError{Key: key, First: first, Second: partition}
	}
	return nil
}

// Forget drops key, for instance once its last window has closed.
func (c *PartitionCheck) Forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.seen, key)
}

// Len returns the number of keys recorded.
func (c *PartitionCheck) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen)
}
