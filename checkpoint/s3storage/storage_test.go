package s3storage_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/checkpointtest"
	"github.com/exactlyonce/exactlyonce/checkpoint/s3storage"
	"github.com/exactlyonce/exactlyonce/testkit/s3kit"
)

func newStorage(t testing.TB, c s3kit.Config, opts s3storage.Options) *s3storage.Storage {
	t.Helper()
	opts.Prefix = c.Prefix + opts.Prefix
	s, err := s3storage.New(c.Client(), c.Bucket, opts)
	require.NoError(t, err)
	return s
}

// One server for the whole suite, a fresh bucket per subtest.
func TestStorage(t *testing.T) {
	srv := s3Server(t)
	checkpointtest.TestStorage(t, func(t *testing.T) checkpoint.Storage {
		return newStorage(t, srv(t), s3storage.Options{})
	})
}

// Processes race Create and Replace through one bucket.
func TestProcessRace(t *testing.T) {
	checkpointtest.TestProcessRace(t,
		func(t *testing.T) string {
			b, err := json.Marshal(s3Server(t)(t))
			require.NoError(t, err)
			return string(b)
		},
		func(shared string) (checkpoint.Storage, error) {
			var c s3kit.Config
			if err := json.Unmarshal([]byte(shared), &c); err != nil {
				return nil, err
			}
			return s3storage.New(c.Client(), c.Bucket, s3storage.Options{Prefix: c.Prefix})
		})
}

// s3Server returns a function giving a fresh bucket per (sub)test: on
// $S3_ENDPOINT, or on one versitygw started for t.
func s3Server(t *testing.T) func(t testing.TB) s3kit.Config {
	t.Helper()
	if testenvExternal() {
		return func(t testing.TB) s3kit.Config { return s3kit.Bucket(t) }
	}
	srv := s3kit.Start(t)
	return func(t testing.TB) s3kit.Config { return srv.NewBucket(t) }
}
