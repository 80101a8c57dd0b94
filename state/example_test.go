package state_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/exactlyonce/exactlyonce/state"
)

// The pull-request service: has this pull request had its first review
// yet, and the exact average time from opening to first review. The state
// is when each open pull request was opened; the first review deletes it,
// so a second review finds nothing. In a service, opened is one of the
// partition's participants (kafkasource.Processor.Participants), and the
// times are the Kafka records' timestamps.
func Example() {
	opened, err := state.NewValue[string, time.Time](state.String{}, state.Time{},
		state.Options{TTL: 30 * 24 * time.Hour}) // forget pull requests never reviewed
	if err != nil {
		panic(err)
	}
	defer opened.Close()

	var total time.Duration
	var reviewed int
	handle := func(pr, action string, at time.Time) {
		switch action {
		case "opened":
			_ = opened.Put(pr, at, at) // fails only with Options.MaxKeys
		case "review_submitted":
			if since, ok := opened.Get(pr, at); ok { // the first review
				opened.Delete(pr, at)
				total += at.Sub(since)
				reviewed++
			}
		}
	}

	t := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	handle("acme/api#1", "opened", t)
	handle("acme/api#2", "opened", t.Add(time.Hour))
	handle("acme/api#1", "review_submitted", t.Add(3*time.Hour))
	handle("acme/api#1", "review_submitted", t.Add(4*time.Hour)) // not the first
	handle("acme/api#2", "review_submitted", t.Add(6*time.Hour))
	fmt.Printf("%d reviewed, average %v, %d waiting\n", reviewed, total/time.Duration(reviewed), opened.Len())
	// Output:
	// 2 reviewed, average 4h0m0s, 0 waiting
}

// A state travels with the checkpoint: the instance that takes the
// partition over restores it (kafkasource does this before the first
// record).
func ExampleValue_Restore() {
	ctx := context.Background()
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

	before, _ := state.NewValue[string, int64](state.String{}, state.Int64{}, state.Options{})
	_ = before.Put("acme/api", 42, at)
	snap, _ := before.Snapshot(ctx, 1)
	_ = before.Close()

	after, _ := state.NewValue[string, int64](state.String{}, state.Int64{}, state.Options{})
	defer after.Close()
	if err := after.Restore(ctx, snap); err != nil {
		fmt.Println("restore:", err) // wraps state.ErrCorrupt and the like; nothing loaded
		return
	}
	n, ok := after.Get("acme/api", at)
	fmt.Println(n, ok)
	// Output:
	// 42 true
}

// Open pull requests per repository, each forgotten 30 days after it was
// last written: a Map whose entries expire one by one.
func ExampleMap() {
	open, _ := state.NewMap[string, int64, time.Time](state.String{}, state.Int64{}, state.Time{},
		state.Options{TTL: 30 * 24 * time.Hour})
	defer open.Close()

	t := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	_ = open.Put("acme/api", 1, t, t)
	_ = open.Put("acme/api", 2, t.Add(20*24*time.Hour), t.Add(20*24*time.Hour))
	_ = open.Put("acme/web", 7, t, t)
	n := 0
	for range open.All("acme/api", t.Add(31*24*time.Hour)) { // #1 has expired
		n++
	}
	fmt.Println("open in acme/api:", n)
	// Output:
	// open in acme/api: 1
}

// review is a struct value: its codec is a few lines, and must write equal
// values as equal bytes.
type review struct {
	Opened   time.Time
	Comments int64
}

type reviewCodec struct{}

func (reviewCodec) Append(dst []byte, r review) []byte {
	dst = binary.AppendVarint(dst, r.Opened.UnixNano())
	return binary.AppendVarint(dst, r.Comments)
}

func (reviewCodec) Decode(b []byte) (review, error) {
	opened, n := binary.Varint(b)
	comments, m := binary.Varint(b[max(n, 0):])
	if n <= 0 || m <= 0 || n+m != len(b) {
		return review{}, errors.New("bad review")
	}
	return review{Opened: time.Unix(0, opened).UTC(), Comments: comments}, nil
}

func ExampleCodec() {
	reviews, _ := state.NewValue[string, review](state.String{}, reviewCodec{}, state.Options{})
	defer reviews.Close()
	t := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	_ = reviews.Put("acme/api#1", review{Opened: t, Comments: 3}, t)
	r, _ := reviews.Get("acme/api#1", t)
	fmt.Println(r.Comments)
	// Output:
	// 3
}
