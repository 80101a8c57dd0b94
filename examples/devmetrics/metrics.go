package devmetrics

import (
	"encoding/binary"
	"errors"
	"math"
	"strings"

	"github.com/exactlyonce/exactlyonce/window"
)

// Metrics is the per-employee hourly aggregate: the article's
// metrics, computed in the stream processor by the window operator. It is
// its own accumulator: counts and a latency sum, all of which merge by
// addition, and whose identity (all zero) is "nothing happened", including
// no review at all: the average is derived at the end, and absent (NULL)
// without reviews.
type Metrics struct {
	PRsMerged, ReviewComments, Reviews, Deployments, Incidents uint64
	ReviewLatencyS                                             float64
}

// Agg is the window.Checkpointable of Metrics.
//
// The hourly windows fire early (Config.EarlyEvery): rows carry a Version (the
// events folded in), so an early partial row is replaced by the final one
// in employee_metrics_window, read with FINAL.
type Agg struct{}

var _ window.Checkpointable[Event, Metrics, Metrics] = Agg{}

func (Agg) Identity() Metrics { return Metrics{} }

func (Agg) Add(acc Metrics, ev Event) Metrics {
	switch ev.Type {
	case TypePRMerged:
		acc.PRsMerged++
	case TypeReviewComment:
		acc.ReviewComments++
	case TypeReview:
		acc.Reviews++
		acc.ReviewLatencyS += ev.LatencyS
	case TypeDeployment:
		acc.Deployments++
	case TypeIncidentOpened:
		acc.Incidents++
	}
	return acc
}

func (Agg) Merge(a, b Metrics) Metrics {
	a.PRsMerged += b.PRsMerged
	a.ReviewComments += b.ReviewComments
	a.Reviews += b.Reviews
	a.ReviewLatencyS += b.ReviewLatencyS
	a.Deployments += b.Deployments
	a.Incidents += b.Incidents
	return a
}

func (Agg) Result(acc Metrics) (Metrics, bool) { return acc, true }

const metricsStateSize = 6 * 8

func (Agg) AppendState(dst []byte, acc Metrics) []byte {
	for _, v := range []uint64{acc.PRsMerged, acc.ReviewComments, acc.Reviews, acc.Deployments, acc.Incidents,
		math.Float64bits(acc.ReviewLatencyS)} {
		dst = binary.BigEndian.AppendUint64(dst, v)
	}
	return dst
}

func (Agg) ParseState(src []byte) (Metrics, error) {
	if len(src) != metricsStateSize {
		return Metrics{}, errors.New("employee metrics: bad state size")
	}
	u := func(i int) uint64 { return binary.BigEndian.Uint64(src[8*i:]) }
	return Metrics{PRsMerged: u(0), ReviewComments: u(1), Reviews: u(2), Deployments: u(3), Incidents: u(4),
		ReviewLatencyS: math.Float64frombits(u(5))}, nil
}

// WindowKey is the window operator's key of an event: its organisation and
// employee. An organisation's events share one Kafka partition (the
// gateway keys them by organisation, PartitionKey), so a key's window lives in one
// partition's operator, whole.
func WindowKey(ev Event) string { return ev.OrgID + "|" + ev.EmployeeID }

// SplitWindowKey undoes WindowKey; organisations never contain "|".
func SplitWindowKey(k string) (org, employee string) {
	org, employee, _ = strings.Cut(k, "|")
	return org, employee
}
