package demo

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/examples/devmetrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGeneratedDeliveriesNormalize: every delivery the demo's providers
// send normalizes to the event the generator built independently, is
// answered 2xx unpublished when it counts nothing, or is rejected.
func TestGeneratedDeliveriesNormalize(t *testing.T) {
	tpl, err := PickTemplates(githubExamples(t))
	require.NoError(t, err)
	ds := generate(rand.New(rand.NewPCG(7, 7)), tpl, 3000, 12, 4*time.Hour)
	kinds := map[string]int{}
	for _, d := range ds {
		ev, err := devmetrics.Normalize(d.Provider, d.EventType, d.ID, d.Body)
		switch {
		case d.Reject:
			var nerr *devmetrics.NormalizeError
			require.ErrorAs(t, err, &nerr, "%s %s", d.Provider, d.EventType)
			kinds["rejected"]++
		case d.Want == nil:
			require.ErrorIs(t, err, devmetrics.ErrNotCounted, "%s %s", d.Provider, d.EventType)
			kinds["not counted"]++
		default:
			require.NoError(t, err)
			require.Equal(t, *d.Want, ev)
			kinds[ev.Type]++
		}
	}
	t.Log(kinds)
	for _, k := range []string{devmetrics.TypePRMerged, devmetrics.TypeReview, devmetrics.TypeReviewComment, devmetrics.TypeDeployment, devmetrics.TypeIncidentOpened,
		devmetrics.TypeIncidentTransitioned, devmetrics.TypeIssueTransitioned, "not counted", "rejected"} {
		assert.Positive(t, kinds[k], k)
	}
}

// TestEveryTenantEndsOnACountedEvent: each tenant (an organisation's
// GitHub org and its Jira site, which Kafka may put on different
// partitions) has a counted event a second before the last hour ends, so
// every partition's event time reaches the end and its last windows close
// (a seed whose last events on one partition were pings left them open past
// the verdict's deadline). Several seeds, since which kinds come last is
// drawn.
func TestEveryTenantEndsOnACountedEvent(t *testing.T) {
	tpl, err := PickTemplates(githubExamples(t))
	require.NoError(t, err)
	const orgs = 12
	end := eventStart.Add(4*time.Hour - time.Second)
	for seed := range uint64(20) {
		newest := map[string]time.Time{}
		for _, d := range generate(rand.New(rand.NewPCG(seed, 7)), tpl, 1000, orgs, 4*time.Hour) {
			if d.Want != nil && d.Want.Time.After(newest[d.Want.OrgID]) {
				newest[d.Want.OrgID] = d.Want.Time
			}
		}
		require.Len(t, newest, 2*orgs, "seed %d: every tenant counts events", seed)
		for tenant, at := range newest {
			assert.Equal(t, end, at, "seed %d: tenant %s's newest counted event", seed, tenant)
		}
	}
}
