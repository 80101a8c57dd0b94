package s3storage_test

import (
	"testing"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/checkpointtest"
	"github.com/exactlyonce/exactlyonce/checkpoint/s3storage"
	"github.com/exactlyonce/exactlyonce/testkit/s3kit"
)

// BenchmarkStorage runs the storage benchmark on S3 (versitygw on this
// machine's disk, or $S3_ENDPOINT); compare with checkpoint's
// BenchmarkFSStorage. 64 MiB blobs go through the default multipart
// threshold, so they are uploaded in 16 MiB parts.
func BenchmarkStorage(b *testing.B) {
	var srv *s3kit.Server
	if !testenvExternal() {
		srv = s3kit.Start(b)
	}
	checkpointtest.BenchmarkStorage(b, func(b *testing.B) checkpoint.Storage {
		if srv != nil {
			return newStorage(b, srv.NewBucket(b), s3storage.Options{})
		}
		return newStorage(b, s3kit.Bucket(b), s3storage.Options{})
	})
}
