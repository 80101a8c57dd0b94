package prreviews_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/testkit"

	"example.com/prreviews"
)

var base = time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)

// events returns the input, in time order: per repository 150 pull
// requests opened two minutes apart, most reviewed 17 minutes to 3 hours
// later, some twice (the second review is no first review), every tenth
// never; then one event per repository two hours after the last, whose
// watermark closes every hour before it.
func events() (evs []prreviews.Event, closerHour time.Time) {
	repos := []string{"acme/api", "acme/web", "acme/cli"}
	for r, repo := range repos {
		for i := range int64(150) {
			opened := base.Add(time.Duration(i)*2*time.Minute + time.Duration(r)*time.Second)
			evs = append(evs, prreviews.Event{ID: fmt.Sprintf("%s#%d/opened", repo, i), Repo: repo, PR: i, Action: "opened", At: opened})
			if i%10 == 9 {
				continue
			}
			first := opened.Add(time.Duration(17+(i*37)%163) * time.Minute)
			evs = append(evs, prreviews.Event{ID: fmt.Sprintf("%s#%d/review-1", repo, i), Repo: repo, PR: i, Action: "review_submitted", At: first})
			if i%3 == 0 {
				evs = append(evs, prreviews.Event{ID: fmt.Sprintf("%s#%d/review-2", repo, i), Repo: repo, PR: i, Action: "review_submitted", At: first.Add(30 * time.Minute)})
			}
		}
	}
	slices.SortStableFunc(evs, func(a, b prreviews.Event) int { return a.At.Compare(b.At) })
	closer := evs[len(evs)-1].At.Add(2 * time.Hour)
	for _, repo := range repos {
		evs = append(evs, prreviews.Event{ID: repo + "/closer", Repo: repo, Action: "closer", At: closer})
	}
	return evs, closer.Truncate(time.Hour)
}

// want computes what the tables must hold, read with FINAL: first reviews
// (repo, pr, wait in ms) and per repository and hour the opened pull
// requests, first reviews and their summed wait, for the hours before
// closerHour.
func want(evs []prreviews.Event, closerHour time.Time) (reviews, hours [][]string) {
	type hour struct {
		repo  string
		start time.Time
	}
	type sums struct{ opened, first, waitMS int64 }
	opened := map[string]time.Time{}
	perHour := map[hour]*sums{}
	var hourOrder []hour
	for _, e := range evs {
		h := hour{e.Repo, e.At.Truncate(time.Hour)}
		if perHour[h] == nil {
			perHour[h] = &sums{}
			hourOrder = append(hourOrder, h)
		}
		key := fmt.Sprintf("%s#%d", e.Repo, e.PR)
		switch e.Action {
		case "opened":
			opened[key] = e.At
			perHour[h].opened++
		case "review_submitted":
			if at, ok := opened[key]; ok {
				delete(opened, key)
				ms := e.At.Sub(at).Milliseconds()
				perHour[h].first++
				perHour[h].waitMS += ms
				reviews = append(reviews, []string{e.Repo, fmt.Sprint(e.PR), fmt.Sprint(ms)})
			}
		}
	}
	slices.SortFunc(reviews, func(a, b []string) int {
		if c := compareStrings(a[0], b[0]); c != 0 {
			return c
		}
		return compareStrings(fmt.Sprintf("%06s", a[1]), fmt.Sprintf("%06s", b[1]))
	})
	slices.SortFunc(hourOrder, func(a, b hour) int {
		if c := a.start.Compare(b.start); c != 0 {
			return c
		}
		return compareStrings(a.repo, b.repo)
	})
	for _, h := range hourOrder {
		if !h.start.Before(closerHour) {
			continue
		}
		s := perHour[h]
		hours = append(hours, []string{h.repo, h.start.Format("2006-01-02 15:04:05.000"),
			fmt.Sprint(s.opened), fmt.Sprint(s.first), fmt.Sprint(s.waitMS)})
	}
	return reviews, hours
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestFirstReviews produces the events over about half a minute while the
// service runs in a process of its own, kills it with SIGKILL twice while
// it is writing rows (the first_reviews count has just grown and is short
// of the total), starts it again each time, and checks the rows read with
// FINAL: every first review once, with its exact wait, and every
// repository hour exact.
func TestFirstReviews(t *testing.T) {
	evs, closerHour := events()
	wantReviews, wantHours := want(evs, closerHour)

	svc := testkit.Setup(t, "service", func() prreviews.Service {
		chAddr, db := testkit.ClickHouse(t)
		s := prreviews.Service{Brokers: testkit.Kafka(t), Group: testkit.Name(t, "prreviews"), Topic: testkit.Name(t, "pull_requests"),
			DB: chsink.DB{Addr: chAddr, Database: db}, Dir: t.TempDir()}
		testkit.CreateTopic(t, s.Brokers, s.Topic, 2)
		for _, q := range prreviews.DDL {
			require.NoError(t, testkit.Exec(t.Context(), chAddr, "", fmt.Sprintf(q, db)))
		}
		return s
	})
	service := testkit.Func(t, "service", func(ctx context.Context) error { return prreviews.Run(ctx, svc) })

	// The producer: 20 events every 300 ms, so that input keeps arriving
	// while the service is killed and restarted.
	w := &kafka.Writer{Addr: kafka.TCP(svc.Brokers...), Topic: svc.Topic, Balancer: &kafka.Hash{},
		RequiredAcks: kafka.RequireAll, BatchTimeout: 5 * time.Millisecond}
	t.Cleanup(func() { _ = w.Close() })
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	produced := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		produced <- func() error {
			for i := 0; i < len(evs); i += 20 {
				var ms []kafka.Message
				for _, e := range evs[i:min(i+20, len(evs))] {
					b, err := json.Marshal(e)
					if err != nil {
						return err
					}
					ms = append(ms, kafka.Message{Key: []byte(e.Repo), Value: b})
				}
				if err := w.WriteMessages(ctx, ms...); err != nil {
					return err
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(300 * time.Millisecond):
				}
			}
			return nil
		}()
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })

	reviews := func() uint64 {
		return testkit.Count(t, svc.DB.Addr, svc.DB.Database, "SELECT count() FROM first_reviews")
	}
	countReviews := func() (uint64, error) {
		return testkit.QueryCount(t.Context(), svc.DB.Addr, svc.DB.Database, "SELECT count() FROM first_reviews")
	}
	total := uint64(len(wantReviews))
	for kill := range 2 {
		kctx, kcancel := context.WithTimeout(t.Context(), 2*time.Minute)
		at := service.KillWhileGrowing(kctx, countReviews)
		kcancel()
		t.Logf("kill %d: SIGKILL with %d of %d first reviews written", kill, at, total)
		assert.Less(t, at, total, "kill %d came after the service had written everything", kill)
		service.Start()
	}
	require.NoError(t, <-produced)

	hours := func() [][]string {
		return testkit.Rows(t, svc.DB.Addr, svc.DB.Database, fmt.Sprintf(
			"SELECT repo, start, opened, first_reviews, wait_ms FROM repo_hour FINAL WHERE start < '%s' ORDER BY start, repo",
			closerHour.Format(time.DateTime)))
	}
	require.Eventually(t, func() bool { return reviews() >= total && len(hours()) >= len(wantHours) }, 2*time.Minute, 100*time.Millisecond)
	assert.Equal(t, wantHours, hours(), "repository hours, FINAL")
	assert.Equal(t, wantReviews, testkit.Rows(t, svc.DB.Addr, svc.DB.Database,
		"SELECT repo, pr, wait_ms FROM first_reviews ORDER BY repo, pr"), "every first review once, with its exact wait")
	var sum int64
	for _, r := range wantReviews {
		var ms int64
		_, _ = fmt.Sscan(r[2], &ms)
		sum += ms
	}
	// The exact average, as a dashboard would read it.
	assert.Equal(t, [][]string{{fmt.Sprint(len(wantReviews)), fmt.Sprint(sum)}}, testkit.Rows(t, svc.DB.Addr, svc.DB.Database,
		"SELECT count(), sum(wait_ms) FROM first_reviews"))
	require.NoError(t, service.Terminate(time.Minute), "a graceful stop")
}
