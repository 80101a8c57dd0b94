package testkit

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/exactlyonce/exactlyonce/internal/embedded"
)

// Environment variables that point tests at an external S3-compatible
// server. With EnvS3Endpoint set nothing is built or started.
const (
	// EnvS3Endpoint is the server's URL, e.g. http://127.0.0.1:7070.
	EnvS3Endpoint = "S3_ENDPOINT"
	// EnvS3AccessKeyID and EnvS3SecretAccessKey are the credentials.
	EnvS3AccessKeyID     = "S3_ACCESS_KEY_ID"
	EnvS3SecretAccessKey = "S3_SECRET_ACCESS_KEY"
	// EnvS3Region defaults to us-east-1.
	EnvS3Region = "S3_REGION"
	// EnvS3Bucket, if set, is an existing bucket all tests share, each under
	// its own key prefix; otherwise every test creates its own bucket.
	EnvS3Bucket = "S3_BUCKET"
)

// S3Config is where a test keeps its objects: Bucket under Prefix (empty,
// or ending in "/").
type S3Config struct {
	Endpoint, Region             string
	AccessKeyID, SecretAccessKey string
	Bucket, Prefix               string
}

// Client returns an S3 client for c, with path-style addressing.
func (c S3Config) Client() *s3.Client {
	return s3.New(s3.Options{
		Region:       c.Region,
		UsePathStyle: true,
		BaseEndpoint: aws.String(c.Endpoint),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: c.AccessKeyID, SecretAccessKey: c.SecretAccessKey}, nil
		}),
	})
}

// S3 returns a fresh bucket (or, with $S3_BUCKET, a fresh prefix in that
// bucket) on $S3_ENDPOINT if set, otherwise on a versitygw (an S3 server in
// Go, Apache-2.0) started for this test on a free loopback port over a
// temporary directory, stopped at cleanup. The first use on a machine
// builds versitygw with `go install` into the cache (about 100 s), which
// needs the Go module proxy. Use it for checkpoint/s3storage.
func S3(t testing.TB) S3Config {
	t.Helper()
	if ep := os.Getenv(EnvS3Endpoint); ep != "" {
		c := S3Config{
			Endpoint:        ep,
			Region:          os.Getenv(EnvS3Region),
			AccessKeyID:     os.Getenv(EnvS3AccessKeyID),
			SecretAccessKey: os.Getenv(EnvS3SecretAccessKey),
		}
		if c.Region == "" {
			c.Region = embedded.S3Region
		}
		if b := os.Getenv(EnvS3Bucket); b != "" {
			c.Bucket, c.Prefix = b, Name(t, "t")+"/"
			return c
		}
		return createBucket(t, c)
	}
	s := StartS3(t)
	if s == nil {
		return S3Config{}
	}
	return s.NewBucket(t)
}

// createBucket creates a bucket named after the test in c.
func createBucket(t testing.TB, c S3Config) S3Config {
	t.Helper()
	c.Bucket = strings.ReplaceAll(Name(t, "eo"), "_", "-")
	ctx, cancel := setupContext(t)
	defer cancel()
	if _, err := c.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(c.Bucket)}); err != nil {
		t.Fatalf("testkit: create bucket %s on %s: %v", c.Bucket, c.Endpoint, err)
	}
	return c
}

// S3Server is a dedicated versitygw that a test may kill and start again on
// the same port and directory (every object survives). Its methods fail the
// test on error, so call them from the test's goroutine.
type S3Server struct {
	t testing.TB
	s *embedded.S3
}

// StartS3 starts a dedicated versitygw for this test, stopped at cleanup,
// building it into the cache first if needed. It ignores $S3_ENDPOINT: a
// test that kills a server needs its own.
func StartS3(t testing.TB) *S3Server {
	t.Helper()
	ctx, cancel := setupContext(t)
	defer cancel()
	s, err := embedded.StartS3(ctx, embedded.S3Options{})
	if err != nil {
		Unavailable(t, "S3 (versitygw)", err)
		return nil
	}
	t.Cleanup(func() { _ = s.Stop() })
	return &S3Server{t: t, s: s}
}

// Config returns the server's endpoint and credentials, without a bucket.
func (s *S3Server) Config() S3Config {
	return S3Config{
		Endpoint: s.s.Endpoint(), Region: embedded.S3Region,
		AccessKeyID: embedded.S3AccessKey, SecretAccessKey: embedded.S3SecretKey,
	}
}

// NewBucket creates a fresh bucket named after t, which may be a subtest of
// the one that started the server.
func (s *S3Server) NewBucket(t testing.TB) S3Config {
	t.Helper()
	return createBucket(t, s.Config())
}

// PID returns the server's process id, or 0 while it is stopped.
func (s *S3Server) PID() int { return s.s.PID() }

// Kill kills the server with SIGKILL and waits until it has exited.
func (s *S3Server) Kill() {
	s.t.Helper()
	if err := s.s.Kill(); err != nil {
		s.t.Fatalf("testkit: %v", err)
	}
}

// Start starts the server again on the same port and directory and waits
// until it answers.
func (s *S3Server) Start() {
	s.t.Helper()
	ctx, cancel := setupContext(s.t)
	defer cancel()
	if err := s.s.Start(ctx); err != nil {
		s.t.Fatalf("testkit: %v", err)
	}
}
