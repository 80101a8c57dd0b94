package main

import (
	"encoding/binary"
	"errors"
	"math"
	"strings"

	"github.com/exactlyonce/exactlyonce/window"
)

// employeeMetrics is the per-employee hourly aggregate: the article's
// metrics, computed in the stream processor by the window operator. It is
// its own accumulator: counts and a latency sum, all of which merge by
// addition, and whose identity (all zero) is "nothing happened", including
// no review at all: the average is derived at the end, and absent (NULL)
// without reviews.
type employeeMetrics struct {
	PRsMerged, ReviewComments, Reviews, Deployments, Incidents uint64
	ReviewLatencyS                                             float64
}

// metricsAgg is the window.Checkpointable of employeeMetrics.
//
// The hourly windows fire early (see earlyEvery): rows carry a Version (the
// events folded in), so an early partial row is replaced by the final one
// in employee_metrics_window, read with FINAL.
type metricsAgg struct{}

var _ window.Checkpointable[Event, employeeMetrics, employeeMetrics] = metricsAgg{}

func (metricsAgg) Identity() employeeMetrics { return employeeMetrics{} }

func (metricsAgg) Add(acc employeeMetrics, ev Event) employeeMetrics {
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

func (metricsAgg) Merge(a, b employeeMetrics) employeeMetrics {
	a.PRsMerged += b.PRsMerged
	a.ReviewComments += b.ReviewComments
	a.Reviews += b.Reviews
	a.ReviewLatencyS += b.ReviewLatencyS
	a.Deployments += b.Deployments
	a.Incidents += b.Incidents
	return a
}

func (metricsAgg) Result(acc employeeMetrics) (employeeMetrics, bool) { return acc, true }

const metricsStateSize = 6 * 8

func (metricsAgg) AppendState(dst []byte, acc employeeMetrics) []byte {
	for _, v := range []uint64{acc.PRsMerged, acc.ReviewComments, acc.Reviews, acc.Deployments, acc.Incidents,
		math.Float64bits(acc.ReviewLatencyS)} {
		dst = binary.BigEndian.AppendUint64(dst, v)
	}
	return dst
}

func (metricsAgg) ParseState(src []byte) (employeeMetrics, error) {
	if len(src) != metricsStateSize {
		return employeeMetrics{}, errors.New("employee metrics: bad state size")
	}
	u := func(i int) uint64 { return binary.BigEndian.Uint64(src[8*i:]) }
	return employeeMetrics{PRsMerged: u(0), ReviewComments: u(1), Reviews: u(2), Deployments: u(3), Incidents: u(4),
		ReviewLatencyS: math.Float64frombits(u(5))}, nil
}

// windowKey is the window operator's key of an event: its organisation and
// employee. An organisation's events share one Kafka partition (the
// gateway keys them by organisation), so a key's window lives in one
// partition's operator, whole.
func windowKey(ev Event) string { return ev.OrgID + "|" + ev.EmployeeID }

// splitWindowKey undoes windowKey; organisations never contain "|".
func splitWindowKey(k string) (org, employee string) {
	org, employee, _ = strings.Cut(k, "|")
	return org, employee
}
