package idempotency

import (
	"context"
	"fmt"

	"github.com/exactlyonce/exactlyonce/internal/meter"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

type handlerMetrics struct {
	// opts holds the attribute option of each "key=value", and statuses of
	// each status code the Handler answers, built once so that recording a
	// measurement allocates nothing: neither the attribute set nor the
	// variadic slice of options a call would build.
	opts     map[string]attrOpt
	statuses map[int]attrOpt

	claims   metric.Int64Counter
	releases metric.Int64Counter
	lostC    metric.Int64Counter
	rejected metric.Int64Counter
	ignored  metric.Int64Counter
	duration metric.Float64Histogram
	effect   metric.Float64Histogram
	timeouts metric.Int64Counter
}

func newHandlerMetrics(mp metric.MeterProvider) (handlerMetrics, error) {
	m := meter.New(mp, "idempotency")
	var hm handlerMetrics
	hm.claims = m.Counter("exactlyonce.idempotency.claims", "{claim}", "Claims by outcome: claimed, done, pending, mismatch, error.")
	hm.releases = m.Counter("exactlyonce.idempotency.releases", "{release}", "Releases after a failed side effect, by result: ok, lost, error, or held (outcome unknown: the key stays pending, not released).")
	hm.lostC = m.Counter("exactlyonce.idempotency.claims.lost", "{claim}", "Claims found taken over or expired, by step: complete, release, extend.")
	hm.rejected = m.Counter("exactlyonce.idempotency.rejected", "{request}", "Requests rejected before claiming, by reason.")
	hm.ignored = m.Counter("exactlyonce.idempotency.ignored", "{delivery}", "Deliveries answered 200 and not published: an ignored event type (reason=event) or a Check that returned ErrIgnored (reason=check).")
	hm.duration = m.Histogram("exactlyonce.idempotency.request.duration", "s", "Time to answer a webhook.")
	hm.timeouts = m.Counter("exactlyonce.idempotency.answer.timeouts", "{delivery}", "Deliveries answered 503 at Options.AnswerTimeout while their side effect still ran.")
	hm.effect = m.Histogram("exactlyonce.idempotency.side_effect.duration", "s", "Time the side effect took.")
	if err := m.Err(); err != nil {
		return handlerMetrics{}, fmt.Errorf("idempotency: metrics: %w", err)
	}
	hm.opts = make(map[string]attrOpt)
	for key, values := range map[string][]string{
		"outcome": {"claimed", "done", "pending", "mismatch", "error"},
		"result":  {"ok", "lost", "error", "held"},
		"step":    {"complete", "release", "extend"},
		"reason":  {"method", "too_large", "signature", "content_type", "key", "malformed", "read", "partition", "check", "check_transient", "event", "read_timeout", "busy", "effect"},
	} {
		for _, v := range values {
			hm.opts[key+"="+v] = newAttrOpt(attribute.String(key, v))
		}
	}
	hm.statuses = make(map[int]attrOpt)
	for _, code := range []int{200, 202, 204, 400, 401, 404, 405, 408, 409, 410, 413, 415, 422, 503} {
		hm.statuses[code] = statusAttr(code)
	}
	return hm, nil
}

// attrOpt is one attribute's option, as the one-element slices that Add and
// Record take: passing a slice that exists already allocates nothing.
type attrOpt struct {
	add []metric.AddOption
	rec []metric.RecordOption
}

func newAttrOpt(kv attribute.KeyValue) attrOpt {
	o := metric.WithAttributes(kv)
	return attrOpt{add: []metric.AddOption{o}, rec: []metric.RecordOption{o}}
}

func statusAttr(code int) attrOpt {
	return newAttrOpt(attribute.Int("http.response.status_code", code))
}

func (m handlerMetrics) opt(key, value string) attrOpt {
	if o, ok := m.opts[key+"="+value]; ok {
		return o
	}
	return newAttrOpt(attribute.String(key, value))
}

func (m handlerMetrics) statusOpt(code int) attrOpt {
	if o, ok := m.statuses[code]; ok {
		return o
	}
	return statusAttr(code)
}

func (m handlerMetrics) claim(ctx context.Context, outcome string) {
	m.claims.Add(ctx, 1, m.opt("outcome", outcome).add...)
}

func (m handlerMetrics) lost(ctx context.Context, step string) {
	m.lostC.Add(ctx, 1, m.opt("step", step).add...)
}

func (m handlerMetrics) reject(ctx context.Context, reason string) {
	m.rejected.Add(ctx, 1, m.opt("reason", reason).add...)
}
