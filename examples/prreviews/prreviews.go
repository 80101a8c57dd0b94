// Package prreviews is the second service a user of the SDK writes, in a
// module of their own: pull-request statistics per repository and hour
// (opened, first reviews, and the exact time from opening to first review)
// into ClickHouse, exactly once. "Has this pull request had its first
// review yet" is keyed state (state.Value), part of every checkpoint like
// the window and the sinks. Its test (prreviews_test.go) kills the service
// with SIGKILL while it writes and checks the rows read with FINAL. It
// imports only public packages of the SDK.
package prreviews

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ClickHouse/ch-go/proto"
	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/dedup"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/sink/chsink/windowsink"
	"github.com/exactlyonce/exactlyonce/state"
	"github.com/exactlyonce/exactlyonce/window"
)

// DDL creates the two tables in database %[1]s: one row per first review,
// and one per repository and hour (a ReplacingMergeTree keyed by window,
// so a window written again after a restart replaces itself).
var DDL = []string{
	`CREATE TABLE %[1]s.first_reviews (repo String, pr Int64, opened DateTime64(3, 'UTC'), reviewed DateTime64(3, 'UTC'), wait_ms Int64)
	ENGINE = MergeTree ORDER BY (repo, pr)
	SETTINGS non_replicated_deduplication_window = 1000, enable_block_number_column = 1`,
	`CREATE TABLE %[1]s.repo_hour (repo String, start DateTime64(3, 'UTC'), version UInt64,
		opened Int64, first_reviews Int64, wait_ms Int64)
	ENGINE = ReplacingMergeTree(version) ORDER BY (repo, start)
	SETTINGS non_replicated_deduplication_window = 1000`,
}

// Event is a pull-request event as the topic carries it (JSON, keyed by
// repository, so a repository's events share a partition).
type Event struct {
	ID     string    `json:"id"`     // unique per event: redeliveries are dropped
	Repo   string    `json:"repo"`   // owner/name
	PR     int64     `json:"pr"`     // number
	Action string    `json:"action"` // "opened", "review_submitted", or anything else
	At     time.Time `json:"at"`
}

// FirstReview is a row of first_reviews.
type FirstReview struct {
	Repo     string
	PR       int64
	Opened   time.Time
	Reviewed time.Time
}

// hourly is what one event adds to its repository's hour.
type hourly struct {
	opened, firstReview bool
	wait                time.Duration
}

type hourRow = window.Row[window.Fields[int64]]

func reviewSchema() []chsink.Column[FirstReview] {
	return []chsink.Column[FirstReview]{
		chsink.String("repo", func(r *FirstReview) string { return r.Repo }),
		chsink.Int64("pr", func(r *FirstReview) int64 { return r.PR }),
		chsink.DateTime64("opened", proto.PrecisionMilli, func(r *FirstReview) time.Time { return r.Opened }),
		chsink.DateTime64("reviewed", proto.PrecisionMilli, func(r *FirstReview) time.Time { return r.Reviewed }),
		chsink.Int64("wait_ms", func(r *FirstReview) int64 { return r.Reviewed.Sub(r.Opened).Milliseconds() }),
	}
}

func hourSchema() []chsink.Column[hourRow] {
	return []chsink.Column[hourRow]{
		chsink.String("repo", func(r *hourRow) string { return r.Key }),
		chsink.DateTime64("start", proto.PrecisionMilli, func(r *hourRow) time.Time { return r.Start }),
		chsink.Int64("opened", func(r *hourRow) int64 { return r.Result[0] }),
		chsink.Int64("first_reviews", func(r *hourRow) int64 { return r.Result[1] }),
		chsink.Int64("wait_ms", func(r *hourRow) int64 { return r.Result[2] }),
	}
}

// Service is where the service reads and writes, as its main would take
// it from flags.
type Service struct {
	Brokers []string
	Group   string
	Topic   string
	DB      chsink.DB
	Dir     string // checkpoints and sink journals: a disk all instances share
}

// Run runs one instance until ctx ends.
func Run(ctx context.Context, s Service) error {
	storage, err := checkpoint.NewFSStorage(s.Dir)
	if err != nil {
		return err
	}
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
	if err != nil {
		return err
	}
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: 100 * time.Millisecond})
	if err != nil {
		return err
	}
	defer coord.Close()
	src, err := kafkasource.New(kafkasource.Group{Brokers: s.Brokers, ID: s.Group, Topics: []string{s.Topic}},
		coord, NewProcessor(s.DB, store),
		kafkasource.Options{SessionTimeout: 6 * time.Second, RebalanceTimeout: 2 * time.Second,
			HeartbeatInterval: 100 * time.Millisecond, MaxWait: 100 * time.Millisecond})
	if err != nil {
		return err
	}
	return src.Run(ctx)
}

// NewProcessor builds one partition's chain: dedup by event id, the
// opened-at state, the first_reviews sink and the hourly window with its
// sink.
func NewProcessor(db chsink.DB, store *checkpoint.Store) kafkasource.ProcessorFunc {
	return kafkasource.Chains(store, func(ctx context.Context, c *checkpoint.Chain) (*kafkasource.Processor, error) {
		d, err := dedup.New(dedup.DefaultTTL, dedup.Options{})
		if err != nil {
			return nil, err
		}
		if err := c.Add("dedup", d); err != nil {
			return nil, err
		}
		// When each pull request without a review yet was opened; the
		// first review deletes it. Forgotten 30 days after opening.
		opened, err := state.NewValue[string, time.Time](state.String{}, state.Time{}, state.Options{TTL: 30 * 24 * time.Hour})
		if err != nil {
			return nil, err
		}
		if err := c.Add("opened", opened); err != nil {
			return nil, err
		}
		opts := chsink.Options{MaxDelay: 100 * time.Millisecond}
		reviews, err := chsink.Open(ctx, c, db, "first_reviews", reviewSchema, opts)
		if err != nil {
			return nil, err
		}
		p := c.Partition().Partition
		agg := window.Sums[hourly, int64]{Of: func(h hourly, v *window.Fields[int64]) {
			if h.opened {
				v[0] = 1
			}
			if h.firstReview {
				v[1] = 1
				v[2] = h.wait.Milliseconds()
			}
		}}
		w, err := window.New(window.Tumbling(time.Hour), agg, window.Options{Inputs: []int{p}, IdleTimeout: 200 * time.Millisecond})
		if err != nil {
			return nil, err
		}
		hours, err := windowsink.Open(ctx, c, db, "repo_hour", w, hourSchema, windowsink.Options{Sink: opts})
		if err != nil {
			return nil, err
		}

		var key []byte
		process := func(ctx context.Context, m kafka.Message) error {
			var ev Event
			if err := json.Unmarshal(m.Value, &ev); err != nil {
				return fmt.Errorf("offset %d: %w", m.Offset, err) // stop, never skip
			}
			key = dedup.AppendKey(key[:0], ev.ID)
			if first, err := d.Observe(key, m.Time); err != nil || !first {
				return err
			}
			pr := fmt.Sprintf("%s#%d", ev.Repo, ev.PR)
			var h hourly
			switch ev.Action {
			case "opened":
				h.opened = true
				if err := opened.Put(pr, ev.At, m.Time); err != nil {
					return err
				}
			case "review_submitted":
				if at, ok := opened.Get(pr, m.Time); ok { // the first review
					opened.Delete(pr, m.Time)
					h.firstReview, h.wait = true, ev.At.Sub(at)
					row := FirstReview{Repo: ev.Repo, PR: ev.PR, Opened: at, Reviewed: ev.At}
					if err := reviews.Add(ctx, sink.Position{Offset: m.Offset}, row); err != nil {
						return err
					}
				}
			}
			return hours.Add(ctx, m.Offset, window.Event[hourly]{Input: p, Key: ev.Repo, Time: ev.At, Value: h})
		}
		return &kafkasource.Processor{Process: process, Tick: hours.Tick, TickInterval: 100 * time.Millisecond}, nil
	})
}
