package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

var errBadEvent = errors.New("pipeline: malformed event")

// parseEvent decodes a Kafka record's value. A record the gateway accepted is
// always well formed; anything else is a bug upstream and stops the chain
// rather than being skipped.
func parseEvent(b []byte) (Event, error) {
	var e Event
	if err := json.Unmarshal(b, &e); err != nil {
		return e, fmt.Errorf("%w: %v", errBadEvent, err)
	}
	if e.OrgID == "" || e.Source == "" || e.EventID == "" || e.Time.IsZero() {
		return e, fmt.Errorf("%w: missing org_id, source, event_id or time", errBadEvent)
	}
	return e, nil
}

// eventStart is the event time of the first generated event. Fixed, so two
// runs with one seed produce the same events.
var eventStart = time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)

// generate returns n distinct events of orgs organisations, spread over span
// of event time in time order.
func generate(rng *rand.Rand, n, orgs int, span time.Duration) []Event {
	types := []string{"pr.opened", "pr.merged", "review.submitted", "issue.transitioned", "deployment"}
	sources := []string{"github", "jira"}
	events := make([]Event, n)
	step := span / time.Duration(n)
	for i := range events {
		src := sources[rng.IntN(len(sources))]
		events[i] = Event{
			OrgID:    fmt.Sprintf("org-%02d", rng.IntN(orgs)),
			Source:   src,
			EventID:  fmt.Sprintf("%s-%08x-%06d", src, rng.Uint32(), i),
			Type:     types[rng.IntN(len(types))],
			Time:     eventStart.Add(time.Duration(i)*step + time.Duration(rng.Int64N(int64(step)))),
			LatencyS: float64(rng.IntN(360000)) / 100,
		}
	}
	return events
}
