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
	tpl, err := pickTemplates(githubExamples(t))
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
