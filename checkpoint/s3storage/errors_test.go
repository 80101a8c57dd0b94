package s3storage_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"syscall"
	"testing"

	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/stretchr/testify/assert"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/s3storage"
)

// reply builds the error the SDK returns for an S3 error reply.
func reply(status int, code string) error {
	return fmt.Errorf("operation error S3: PutObject: %w", &smithyhttp.ResponseError{
		Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}},
		Err:      &smithy.GenericAPIError{Code: code},
	})
}

func TestRetryable(t *testing.T) {
	tests := []struct {
		give error
		want bool
	}{
		{give: nil, want: false},
		{give: reply(500, "InternalError"), want: true},
		{give: reply(503, "SlowDown"), want: true},
		{give: reply(408, "RequestTimeout"), want: true},
		{give: reply(429, "TooManyRequests"), want: true},
		{give: reply(409, "ConditionalRequestConflict"), want: true},
		{give: reply(409, "BucketAlreadyExists"), want: false},
		{give: reply(412, "PreconditionFailed"), want: false},
		{give: reply(403, "AccessDenied"), want: false},
		{give: reply(404, "NoSuchBucket"), want: false},
		{give: reply(400, "InvalidRequest"), want: false},
		{give: fmt.Errorf("dial: %w", syscall.ECONNREFUSED), want: true},
		{give: fmt.Errorf("read: %w", syscall.ECONNRESET), want: true},
		{give: fmt.Errorf("body: %w", io.ErrUnexpectedEOF), want: true},
		{give: fmt.Errorf("x: %w", context.Canceled), want: false},
		{give: fmt.Errorf("x: %w", context.DeadlineExceeded), want: false},
		{give: fmt.Errorf("x: %w", checkpoint.ErrConflict), want: false},
		{give: fmt.Errorf("x: %w", checkpoint.ErrNotFound), want: false},
		{give: errors.New("something else"), want: false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, s3storage.IsRetryable(tt.give), "%v", tt.give)
	}
}

func TestNewRefusesInvalidOptions(t *testing.T) {
	client := s3storage.NewClient(s3storage.ClientConfig{Endpoint: "http://127.0.0.1:1"})
	tests := []struct {
		name   string
		bucket string
		opts   s3storage.Options
	}{
		{name: "empty bucket", bucket: "", opts: s3storage.Options{}},
		{name: "small parts", bucket: "b", opts: s3storage.Options{PartSize: 1 << 20}},
		{name: "negative threshold", bucket: "b", opts: s3storage.Options{MultipartThreshold: -1}},
		{name: "no attempts", bucket: "b", opts: s3storage.Options{MaxAttempts: -1}},
		{name: "absolute prefix", bucket: "b", opts: s3storage.Options{Prefix: "/x/"}},
		{name: "backoff upside down", bucket: "b", opts: s3storage.Options{InitialBackoff: 10, MaxBackoff: 5}},
	}
	for _, tt := range tests {
		_, err := s3storage.New(client, tt.bucket, tt.opts)
		assert.ErrorIs(t, err, s3storage.ErrInvalidOptions, tt.name)
	}
	_, err := s3storage.New(nil, "b", s3storage.Options{})
	assert.ErrorIs(t, err, s3storage.ErrInvalidOptions, "nil client")
	_, err = s3storage.New(client, "b", s3storage.Options{})
	assert.NoError(t, err, "the zero Options are valid")
}
