package s3storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/exactlyonce/exactlyonce/checkpoint"

	"github.com/exactlyonce/exactlyonce/internal/backoff"
)

// Defaults for Options.
const (
	// DefaultMultipartThreshold is the size from which a blob is uploaded in
	// parts. A single PUT of a large blob is retried whole; parts are
	// retried one by one.
	DefaultMultipartThreshold = 64 << 20
	// DefaultPartSize is the size of each part but the last.
	DefaultPartSize = 16 << 20
	// MinPartSize is S3's smallest part (but the last).
	MinPartSize = 5 << 20
	// DefaultPartConcurrency is how many parts upload at once.
	DefaultPartConcurrency = 4
	// DefaultMaxAttempts bounds the attempts of every request.
	DefaultMaxAttempts = 5
	// DefaultInitialBackoff and DefaultMaxBackoff bound the wait before a
	// retry: a random time up to Initial*2^(attempt-1), at most Max.
	DefaultInitialBackoff = 50 * time.Millisecond
	DefaultMaxBackoff     = 2 * time.Second
)

// Options configures New. The zero value is valid.
type Options struct {
	// Prefix is put before every name to form the object key, so several
	// pipelines can share a bucket ("pipeline-a/"). Default: none.
	Prefix string
	// MultipartThreshold is the blob size from which Put, Create and
	// Replace upload in parts. Default: DefaultMultipartThreshold.
	MultipartThreshold int
	// PartSize is the size of each part but the last, at least MinPartSize.
	// Default: DefaultPartSize.
	PartSize int
	// PartConcurrency is how many parts of one blob are uploaded at once.
	// Default: DefaultPartConcurrency.
	PartConcurrency int
	// MaxAttempts bounds the attempts of each request (a part of a
	// multipart upload is one request). More attempts ride out longer
	// outages but hold a checkpoint longer before it fails. Default:
	// DefaultMaxAttempts.
	MaxAttempts int
	// InitialBackoff and MaxBackoff bound the wait between attempts: a
	// random time (full jitter) up to InitialBackoff*2^(attempt-1), at most
	// MaxBackoff. Default: DefaultInitialBackoff and DefaultMaxBackoff.
	InitialBackoff, MaxBackoff time.Duration
}

// policy is the retry policy of every request: exponential, full jitter.
func (o *Options) policy() backoff.Policy {
	return backoff.Policy{Initial: o.InitialBackoff, Max: o.MaxBackoff, Multiplier: 2, Jitter: 1, MaxAttempts: o.MaxAttempts}
}

func (o *Options) setDefaults() error {
	if o.MultipartThreshold == 0 {
		o.MultipartThreshold = DefaultMultipartThreshold
	}
	if o.PartSize == 0 {
		o.PartSize = DefaultPartSize
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.PartConcurrency == 0 {
		o.PartConcurrency = DefaultPartConcurrency
	}
	if o.InitialBackoff == 0 {
		o.InitialBackoff = DefaultInitialBackoff
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	switch {
	case strings.HasPrefix(o.Prefix, "/"):
		return fmt.Errorf("%w: Prefix %q starts with a slash", ErrInvalidOptions, o.Prefix)
	case o.MultipartThreshold < 0:
		return fmt.Errorf("%w: MultipartThreshold %d is negative", ErrInvalidOptions, o.MultipartThreshold)
	case o.PartSize < MinPartSize:
		return fmt.Errorf("%w: PartSize %d is below S3's minimum %d", ErrInvalidOptions, o.PartSize, MinPartSize)
	case o.PartConcurrency < 1:
		return fmt.Errorf("%w: PartConcurrency %d is below 1", ErrInvalidOptions, o.PartConcurrency)
	case o.MaxAttempts < 1:
		return fmt.Errorf("%w: MaxAttempts %d is below 1", ErrInvalidOptions, o.MaxAttempts)
	}
	if err := o.policy().Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	return nil
}

// Storage is a checkpoint.Storage in an S3 bucket: each name is the key
// Options.Prefix+name. It is safe for concurrent use, also by processes on
// other machines sharing the bucket.
type Storage struct {
	client *s3.Client
	bucket string
	opts   Options
	policy backoff.Policy
}

var _ checkpoint.Storage = (*Storage)(nil)

// New returns a Storage in bucket, which must exist. The client's own
// retries are turned off for the calls Storage makes: it retries itself, so
// that it knows when a conditional write's outcome became uncertain.
func New(client *s3.Client, bucket string, opts Options) (*Storage, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidOptions)
	}
	if bucket == "" {
		return nil, fmt.Errorf("%w: empty bucket", ErrInvalidOptions)
	}
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	return &Storage{client: client, bucket: bucket, opts: opts, policy: opts.policy()}, nil
}

// ClientConfig is what NewClient needs to reach an S3-compatible server
// with static credentials.
type ClientConfig struct {
	// Endpoint is the server's URL ("http://127.0.0.1:7070"); empty means
	// AWS's endpoint for Region.
	Endpoint string
	// Region defaults to "us-east-1".
	Region                       string
	AccessKeyID, SecretAccessKey string
}

// NewClient returns an S3 client for c, addressing buckets by path (which
// every S3-compatible server supports). Programs on AWS usually build their
// client from config.LoadDefaultConfig instead.
func NewClient(c ClientConfig) *s3.Client {
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	return s3.New(s3.Options{
		Region:       c.Region,
		UsePathStyle: true,
		BaseEndpoint: nonEmpty(c.Endpoint),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: c.AccessKeyID, SecretAccessKey: c.SecretAccessKey, Source: "s3storage.ClientConfig"}, nil
		}),
	})
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// noRetry turns the SDK's retries off for one call: Storage retries itself.
func noRetry(o *s3.Options) { o.Retryer = aws.NopRetryer{} }

func (s *Storage) key(name string) string { return s.opts.Prefix + name }

func (s *Storage) check(ctx context.Context, op, name string) error {
	if !checkpoint.ValidName(name) {
		return fmt.Errorf("checkpoint: %s %q: %w", op, name, checkpoint.ErrInvalidName)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("checkpoint: %s %q: %w", op, name, err)
	}
	return nil
}

// retry runs fn until it succeeds, fails with an error that is not
// Retryable, or MaxAttempts are spent. It reports whether any failed attempt
// may have been applied by the server (its outcome is unknown).
func (s *Storage) retry(ctx context.Context, fn func(ctx context.Context) error) (ambiguous bool, err error) {
	for attempt := 1; ; attempt++ {
		err = fn(ctx)
		if err == nil {
			return ambiguous, nil
		}
		if !definite(err) {
			ambiguous = true
		}
		if !IsRetryable(err) || !s.policy.Retry(attempt) {
			return ambiguous, err
		}
		t := time.NewTimer(s.policy.Delay(attempt, rand.Float64))
		select {
		case <-ctx.Done():
			t.Stop()
			return ambiguous, fmt.Errorf("%w (after %v)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// definite reports whether a failed request was certainly not applied: the
// connection was refused, or the server refused it with a 4xx reply (408
// Request Timeout aside, which may come after the body was read).
func definite(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true // no connection, no request
	}
	s := status(err)
	return s >= 400 && s < 500 && s != 408
}

// Put implements checkpoint.Storage. Blobs of MultipartThreshold bytes or
// more are uploaded in parts; the object appears whole when the upload
// completes, or not at all.
func (s *Storage) Put(ctx context.Context, name string, data []byte) error {
	if err := s.check(ctx, "put", name); err != nil {
		return err
	}
	if _, _, err := s.write(ctx, name, data, condition{}); err != nil {
		return fmt.Errorf("checkpoint: put %q: %w", name, err)
	}
	return nil
}

// condition is a conditional write's precondition: none for Put.
type condition struct {
	ifNoneMatch, ifMatch *string
}

func (s *Storage) Create(ctx context.Context, name string, data []byte) (checkpoint.Version, error) {
	if err := s.check(ctx, "create", name); err != nil {
		return "", err
	}
	return s.conditional(ctx, "create", name, data, condition{ifNoneMatch: aws.String("*")})
}

// Replace implements checkpoint.Storage with If-Match: v (v is the ETag).
// Ambiguous retries are resolved as in Create.
func (s *Storage) Replace(ctx context.Context, name string, data []byte, v checkpoint.Version) (checkpoint.Version, error) {
	if err := s.check(ctx, "replace", name); err != nil {
		return "", err
	}
	if v == "" {
		return "", fmt.Errorf("checkpoint: replace %q: zero Version: %w", name, checkpoint.ErrConflict)
	}
	return s.conditional(ctx, "replace", name, data, condition{ifMatch: aws.String(string(v))})
}

func (s *Storage) conditional(ctx context.Context, op, name string, data []byte, cond condition) (checkpoint.Version, error) {
	v, ambiguous, err := s.write(ctx, name, data, cond)
	switch {
	case err == nil:
		return v, nil
	case isPrecondition(err) || (cond.ifMatch != nil && isNotFound(err)) || (ambiguous && apiCode(err) == "NoSuchUpload"):
		if !ambiguous {
			return "", fmt.Errorf("checkpoint: %s %q: %w", op, name, checkpoint.ErrConflict)
		}
		return s.resolve(ctx, op, name, data, err)
	case ambiguous:
		return "", fmt.Errorf("checkpoint: %s %q: %w: %w", op, name, ErrOutcomeUnknown, err)
	default:
		return "", fmt.Errorf("checkpoint: %s %q: %w", op, name, err)
	}
}

// resolve decides the outcome of a conditional write whose retry was refused
// after an earlier attempt's reply was lost: if the object holds exactly
// data, the lost attempt was applied.
func (s *Storage) resolve(ctx context.Context, op, name string, data []byte, cause error) (checkpoint.Version, error) {
	got, v, err := s.getVersion(ctx, name)
	if err == nil && bytes.Equal(got, data) {
		return v, nil
	}
	if err == nil || errors.Is(err, checkpoint.ErrNotFound) {
		err = cause
	}
	return "", fmt.Errorf("checkpoint: %s %q: %w: %w", op, name, ErrOutcomeUnknown, err)
}

// Get implements checkpoint.Storage.
func (s *Storage) Get(ctx context.Context, name string) ([]byte, error) {
	if err := s.check(ctx, "get", name); err != nil {
		return nil, err
	}
	data, _, err := s.getVersion(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: get %q: %w", name, err)
	}
	return data, nil
}

// GetVersion implements checkpoint.Storage. The Version is the ETag.
func (s *Storage) GetVersion(ctx context.Context, name string) ([]byte, checkpoint.Version, error) {
	if err := s.check(ctx, "get", name); err != nil {
		return nil, "", err
	}
	data, v, err := s.getVersion(ctx, name)
	if err != nil {
		return nil, "", fmt.Errorf("checkpoint: get %q: %w", name, err)
	}
	return data, v, nil
}

func (s *Storage) getVersion(ctx context.Context, name string) ([]byte, checkpoint.Version, error) {
	var (
		data []byte
		etag string
	)
	_, err := s.retry(ctx, func(ctx context.Context) error {
		out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: aws.String(s.key(name))}, noRetry)
		if err != nil {
			if isNotFound(err) {
				return checkpoint.ErrNotFound
			}
			return err
		}
		defer out.Body.Close()
		buf := bytes.NewBuffer(make([]byte, 0, max(aws.ToInt64(out.ContentLength), 0)))
		if _, err := io.Copy(buf, out.Body); err != nil {
			return err // a cut body is retried whole
		}
		data, etag = buf.Bytes(), aws.ToString(out.ETag)
		return nil
	})
	return data, checkpoint.Version(etag), err
}

// List implements checkpoint.Storage, page by page (1000 keys a page on
// S3), each page retried on its own. Keys below Prefix that are not valid
// names are skipped.
func (s *Storage) List(ctx context.Context, prefix string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("checkpoint: list %q: %w", prefix, err)
	}
	var names []string
	var token *string
	for {
		var out *s3.ListObjectsV2Output
		_, err := s.retry(ctx, func(ctx context.Context) error {
			var err error
			out, err = s.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{
				Bucket: &s.bucket, Prefix: aws.String(s.key(prefix)), ContinuationToken: token,
			}, noRetry)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("checkpoint: list %q: %w", prefix, err)
		}
		for _, o := range out.Contents {
			name, ok := strings.CutPrefix(aws.ToString(o.Key), s.opts.Prefix)
			if ok && checkpoint.ValidName(name) {
				names = append(names, name)
			}
		}
		if !aws.ToBool(out.IsTruncated) || out.NextContinuationToken == nil {
			break
		}
		token = out.NextContinuationToken
	}
	sort.Strings(names)
	return names, nil
}

// Delete implements checkpoint.Storage.
func (s *Storage) Delete(ctx context.Context, name string) error {
	if err := s.check(ctx, "delete", name); err != nil {
		return err
	}
	_, err := s.retry(ctx, func(ctx context.Context) error {
		_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: aws.String(s.key(name))}, noRetry)
		if err != nil && isNotFound(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("checkpoint: delete %q: %w", name, err)
	}
	return nil
}
