package s3kit

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/exactlyonce/exactlyonce/internal/embedded"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// Environment variables that point tests at an external S3-compatible
// server. With EnvEndpoint set nothing is built or started.
const (
	// EnvEndpoint is the server's URL, e.g. http://127.0.0.1:7070.
	EnvEndpoint = "S3_ENDPOINT"
	// EnvAccessKeyID and EnvSecretAccessKey are the credentials.
	EnvAccessKeyID     = "S3_ACCESS_KEY_ID"
	EnvSecretAccessKey = "S3_SECRET_ACCESS_KEY"
	// EnvRegion defaults to us-east-1.
	EnvRegion = "S3_REGION"
	// EnvBucket, if set, is an existing bucket all tests share, each under
	// its own key prefix; otherwise every test creates its own bucket.
	EnvBucket = "S3_BUCKET"
)

// Config is where a test keeps its objects: Bucket under Prefix (empty,
// or ending in "/").
type Config struct {
	Endpoint, Region             string
	AccessKeyID, SecretAccessKey string
	Bucket, Prefix               string
}

// Client returns an S3 client for c, with path-style addressing.
func (c Config) Client() *s3.Client {
	return s3.New(s3.Options{
		Region:       c.Region,
		UsePathStyle: true,
		BaseEndpoint: aws.String(c.Endpoint),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: c.AccessKeyID, SecretAccessKey: c.SecretAccessKey}, nil
		}),
	})
}

// Bucket returns a fresh bucket (or, with $S3_BUCKET, a fresh prefix in that
// bucket) on $S3_ENDPOINT if set, otherwise on a versitygw (an S3 server in
// Go, Apache-2.0) started for this test on a free loopback port over a
// temporary directory, stopped at cleanup. The first use on a machine
// builds versitygw with `go install` into the cache (about 100 s), which
// needs the Go module proxy. Use it for checkpoint/s3storage.
func Bucket(t testing.TB) Config {
	t.Helper()
	if ep := os.Getenv(EnvEndpoint); ep != "" {
		c := Config{
			Endpoint:        ep,
			Region:          os.Getenv(EnvRegion),
			AccessKeyID:     os.Getenv(EnvAccessKeyID),
			SecretAccessKey: os.Getenv(EnvSecretAccessKey),
		}
		if c.Region == "" {
			c.Region = embedded.S3Region
		}
		if b := os.Getenv(EnvBucket); b != "" {
			c.Bucket, c.Prefix = b, testkit.Name(t, "t")+"/"
			return c
		}
		return createBucket(t, c)
	}
	s := Start(t)
	if s == nil {
		return Config{}
	}
	return s.NewBucket(t)
}

// createBucket creates a bucket named after the test in c.
func createBucket(t testing.TB, c Config) Config {
	t.Helper()
	c.Bucket = strings.ReplaceAll(testkit.Name(t, "eo"), "_", "-")
	ctx, cancel := setupContext(t)
	defer cancel()
	if _, err := c.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(c.Bucket)}); err != nil {
		t.Fatalf("s3kit: create bucket %s on %s: %v", c.Bucket, c.Endpoint, err)
	}
	return c
}

// Server is a dedicated versitygw that a test may kill and start again on
// the same port and directory (every object survives). Its methods fail the
// test on error, so call them from the test's goroutine.
type Server struct {
	t testing.TB
	s *embedded.S3
}

// Start starts a dedicated versitygw for this test, stopped at cleanup,
// building it into the cache first if needed. It ignores $S3_ENDPOINT: a
// test that kills a server needs its own.
func Start(t testing.TB) *Server {
	t.Helper()
	ctx, cancel := setupContext(t)
	defer cancel()
	s, err := embedded.StartS3(ctx, embedded.S3Options{})
	if err != nil {
		testkit.Unavailable(t, "S3 (versitygw)", err)
		return nil
	}
	t.Cleanup(func() { _ = s.Stop() })
	return &Server{t: t, s: s}
}

// Config returns the server's endpoint and credentials, without a bucket.
func (s *Server) Config() Config {
	return Config{
		Endpoint: s.s.Endpoint(), Region: embedded.S3Region,
		AccessKeyID: embedded.S3AccessKey, SecretAccessKey: embedded.S3SecretKey,
	}
}

// NewBucket creates a fresh bucket named after t, which may be a subtest of
// the one that started the server.
func (s *Server) NewBucket(t testing.TB) Config {
	t.Helper()
	return createBucket(t, s.Config())
}

// PID returns the server's process id, or 0 while it is stopped.
func (s *Server) PID() int { return s.s.PID() }

// Kill kills the server with SIGKILL and waits until it has exited.
func (s *Server) Kill() {
	s.t.Helper()
	if err := s.s.Kill(); err != nil {
		s.t.Fatalf("s3kit: %v", err)
	}
}

// Start starts the server again on the same port and directory and waits
// until it answers.
func (s *Server) Start() {
	s.t.Helper()
	ctx, cancel := setupContext(s.t)
	defer cancel()
	if err := s.s.Start(ctx); err != nil {
		s.t.Fatalf("s3kit: %v", err)
	}
}

// setupContext returns a context for set-up work bounded by three minutes
// (as testkit's) and by the test's own context.
func setupContext(t testing.TB) (context.Context, context.CancelFunc) {
	ctx := context.Background()
	if tt, ok := t.(interface{ Context() context.Context }); ok {
		ctx = tt.Context()
	}
	return context.WithTimeout(ctx, 3*time.Minute)
}
