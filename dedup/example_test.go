package dedup_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/exactlyonce/exactlyonce/dedup"
)

func Example() {
	d, err := dedup.New(24*time.Hour, dedup.Options{})
	if err != nil {
		panic(err)
	}
	defer d.Close()

	start := time.Date(2026, 10, 28, 12, 0, 0, 0, time.UTC)
	var key []byte
	deliver := func(eventID string, after time.Duration) {
		key = dedup.AppendKey(key[:0], "org-1", "github", eventID)
		first, err := d.Observe(key, start.Add(after))
		if err != nil {
			fmt.Println("error:", err) // nothing recorded: fail, never drop
			return
		}
		fmt.Printf("%s at +%v: first=%v\n", eventID, after, first)
	}
	deliver("delivery-1", 0)
	deliver("delivery-1", 23*time.Hour) // the provider retried: caught
	deliver("delivery-2", 24*time.Hour)
	deliver("delivery-1", 24*time.Hour) // the check at 23h did not extend it
	// Output:
	// delivery-1 at +0s: first=true
	// delivery-1 at +23h0m0s: first=false
	// delivery-2 at +24h0m0s: first=true
	// delivery-1 at +24h0m0s: first=true
}

// A deduplicator's state travels with the checkpoint: restore it on the
// instance that takes over the partition.
func ExampleDeduplicator_Restore() {
	ctx := context.Background()
	at := time.Date(2026, 10, 28, 12, 0, 0, 0, time.UTC)

	before, _ := dedup.New(time.Hour, dedup.Options{})
	before.Observe(dedup.Key("org-1", "jira", "42"), at)
	state, _ := before.Snapshot(ctx, 1)
	before.Close()

	after, _ := dedup.New(time.Hour, dedup.Options{})
	defer after.Close()
	if err := after.Restore(ctx, state); err != nil {
		fmt.Println("restore:", err)
		return
	}
	first, _ := after.Observe(dedup.Key("org-1", "jira", "42"), at.Add(time.Minute))
	fmt.Println("first:", first)

	err := after.Restore(ctx, state[:len(state)-1])
	fmt.Println("truncated snapshot rejected:", errors.Is(err, dedup.ErrCorrupt))
	// Output:
	// first: false
	// truncated snapshot rejected: true
}

// A batch of records, as one Kafka fetch returns them, decided at once: the
// answers are those of one Observe per record, in order, including the
// duplicate inside the batch.
func ExampleDeduplicator_ObserveBatch() {
	d, err := dedup.New(24*time.Hour, dedup.Options{})
	if err != nil {
		panic(err)
	}
	defer d.Close()

	at := time.Date(2026, 10, 28, 12, 0, 0, 0, time.UTC)
	batch := []dedup.Sighting{
		{Key: dedup.Key("org-1", "github", "d-1"), Time: at},
		{Key: dedup.Key("org-1", "github", "d-2"), Time: at.Add(time.Second)},
		{Key: dedup.Key("org-1", "github", "d-1"), Time: at.Add(2 * time.Second)}, // redelivered
	}
	first, err := d.ObserveBatch(batch, nil)
	if err != nil {
		// first holds the answers of the records before the failing one;
		// nothing is recorded for the rest.
		fmt.Println("error:", err)
		return
	}
	fmt.Println(first)
	// Output:
	// [true true false]
}
