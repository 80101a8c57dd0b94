package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/testkit"
)

// Environment variables that point tests at external servers: the test
// kit's.
const (
	EnvClickHouseAddr = testkit.EnvClickHouseAddr
	EnvKafkaBrokers   = testkit.EnvKafkaBrokers
	EnvRedisAddr      = testkit.EnvRedisAddr
	EnvCI             = testkit.EnvCI
)

// startTimeout bounds every service start and set-up call made by this
// package.
const startTimeout = 3 * time.Minute

// unavailable fails the test when CI=true and skips it otherwise, with the
// reason either way.
func unavailable(t testing.TB, service string, err error) {
	t.Helper()
	testkit.Unavailable(t, service, err)
}

// setupContext returns a context for set-up work bounded by startTimeout and
// by the test's deadline.
func setupContext(t testing.TB) (context.Context, context.CancelFunc) {
	ctx := context.Background()
	if tt, ok := t.(interface{ Context() context.Context }); ok {
		ctx = tt.Context()
	}
	return context.WithTimeout(ctx, startTimeout)
}

// Name returns a name unique to this test and this run; see testkit.Name.
func Name(t testing.TB, prefix string) string {
	t.Helper()
	return testkit.Name(t, prefix)
}
