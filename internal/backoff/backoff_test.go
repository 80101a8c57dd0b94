package backoff_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/exactlyonce/exactlyonce/internal/backoff"
)

func TestDelay(t *testing.T) {
	p := backoff.Policy{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2}
	zero := func() float64 { return 0 }
	almostOne := func() float64 { return math.Nextafter(1, 0) }
	tests := []struct {
		name    string
		give    backoff.Policy
		attempt int
		r       func() float64
		want    time.Duration
	}{
		{name: "first retry", give: p, attempt: 1, r: zero, want: 100 * time.Millisecond},
		{name: "grows", give: p, attempt: 3, r: zero, want: 400 * time.Millisecond},
		{name: "capped", give: p, attempt: 5, r: zero, want: time.Second},
		{name: "no overflow", give: p, attempt: 1 << 20, r: zero, want: time.Second},
		{name: "attempt 0 is the first", give: p, attempt: 0, r: zero, want: 100 * time.Millisecond},
		{name: "full jitter, low draw", give: withJitter(p, 1), attempt: 2, r: almostOne, want: 0},
		{name: "full jitter, high draw", give: withJitter(p, 1), attempt: 2, r: zero, want: 200 * time.Millisecond},
		{name: "a tenth", give: withJitter(p, 0.1), attempt: 2, r: almostOne, want: 180 * time.Millisecond},
		{name: "multiplier 1 is constant", give: backoff.Policy{Initial: time.Second, Max: time.Minute, Multiplier: 1}, attempt: 9, r: zero, want: time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.InDelta(t, float64(tt.want), float64(tt.give.Delay(tt.attempt, tt.r)), float64(time.Microsecond))
		})
	}
}

func withJitter(p backoff.Policy, j float64) backoff.Policy {
	p.Jitter = j
	return p
}

func TestRetry(t *testing.T) {
	p := backoff.Policy{MaxAttempts: 3}
	assert.True(t, p.Retry(1))
	assert.True(t, p.Retry(2))
	assert.False(t, p.Retry(3), "the third attempt was the last")
	assert.True(t, backoff.Policy{}.Retry(1000), "0 is no bound")
}

func TestValidate(t *testing.T) {
	ok := backoff.Policy{Initial: time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: 0.5}
	assert.NoError(t, ok.Validate())
	for _, bad := range []backoff.Policy{
		{Initial: -1, Max: time.Second, Multiplier: 2},
		{Initial: time.Second, Max: time.Millisecond, Multiplier: 2},
		{Max: time.Second, Multiplier: 0.5},
		{Max: time.Second, Multiplier: math.NaN()},
		{Max: time.Second, Multiplier: 2, Jitter: 1.5},
		{Max: time.Second, Multiplier: 2, MaxAttempts: -1},
	} {
		assert.ErrorIs(t, bad.Validate(), backoff.ErrInvalid, "%+v", bad)
	}
}
