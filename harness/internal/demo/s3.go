package demo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/exactlyonce/exactlyonce/checkpoint/s3storage"
	"github.com/exactlyonce/exactlyonce/internal/embedded"
)

// With -checkpoints s3 the processors keep their checkpoints and sink
// journals in an S3 bucket instead of a local directory, as processors on
// several machines would: on $S3_ENDPOINT (credentials in
// $S3_ACCESS_KEY_ID and $S3_SECRET_ACCESS_KEY) or on an embedded versitygw.

// s3Location is where the processors' state lives on S3.
type s3Location struct {
	Endpoint, Bucket string
}

// StartCheckpointStore prepares the processors' storage: nothing for "fs",
// a server and a bucket for "s3". It returns the processor flags and
// environment (credentials) that name it.
func (d *Pipeline) StartCheckpointStore(ctx context.Context) (args, env []string, err error) {
	switch d.Config.Checkpoints {
	case "", "fs":
		return nil, nil, nil
	case "s3":
	default:
		return nil, nil, fmt.Errorf("-checkpoints %q: want fs or s3", d.Config.Checkpoints)
	}
	endpoint := os.Getenv("S3_ENDPOINT")
	if endpoint == "" {
		dir := filepath.Join(d.Dir, "s3")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, nil, err
		}
		srv, err := embedded.StartS3(ctx, embedded.S3Options{Dir: dir})
		if err != nil {
			return nil, nil, fmt.Errorf("start S3 (versitygw): %w", err)
		}
		d.Cleanups = append(d.Cleanups, func() { _ = srv.Stop() })
		d.S3 = srv
		endpoint = srv.Endpoint()
		d.Say("S3 (versitygw, pid %d) listening on %s", srv.PID(), endpoint)
	}
	loc := s3Location{Endpoint: endpoint, Bucket: "pipeline-" + d.DB[len("demo_"):]}
	if _, err := s3Client(loc).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(loc.Bucket)}); err != nil {
		return nil, nil, fmt.Errorf("create bucket %s on %s: %w", loc.Bucket, endpoint, err)
	}
	d.Say("checkpoints and sink journals in s3://%s on %s", loc.Bucket, endpoint)
	key, secret := s3Credentials()
	return []string{"-s3-endpoint=" + loc.Endpoint, "-s3-bucket=" + loc.Bucket},
		[]string{"S3_ACCESS_KEY_ID=" + key, "S3_SECRET_ACCESS_KEY=" + secret}, nil
}

// s3Credentials are $S3_ENDPOINT's, or the embedded versitygw's.
func s3Credentials() (key, secret string) {
	if os.Getenv("S3_ENDPOINT") == "" {
		return embedded.S3AccessKey, embedded.S3SecretKey
	}
	return os.Getenv("S3_ACCESS_KEY_ID"), os.Getenv("S3_SECRET_ACCESS_KEY")
}

func s3Client(loc s3Location) *s3.Client {
	key, secret := s3Credentials()
	return s3storage.NewClient(s3storage.ClientConfig{Endpoint: loc.Endpoint, Region: os.Getenv("S3_REGION"),
		AccessKeyID: key, SecretAccessKey: secret})
}
