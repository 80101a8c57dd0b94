package s3storage

import (
	"context"
	"errors"

	"github.com/aws/smithy-go"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/internal/netfail"
)

// ErrOutcomeUnknown is wrapped by the error of a conditional write whose
// outcome the storage could not resolve: an attempt may have been applied
// (its reply was lost), a retry was refused by the condition, and reading the
// object back did not show this write's content. The write may have been
// applied and then replaced by another writer, or never applied. It does not
// wrap checkpoint.ErrConflict.
var ErrOutcomeUnknown = errors.New("s3storage: outcome of the conditional write unknown")

// ErrUnknownOutcome is ErrOutcomeUnknown.
//
// Deprecated: use ErrOutcomeUnknown, as kafkatxn and idempotency name it.
var ErrUnknownOutcome = ErrOutcomeUnknown

// ErrInvalidOptions is wrapped by New's error for options it refuses.
var ErrInvalidOptions = errors.New("s3storage: invalid options")

// statusCoder is implemented by the SDK's HTTP response errors.
type statusCoder interface{ HTTPStatusCode() int }

// status returns the HTTP status of an S3 error reply, or 0.
func status(err error) int {
	var sc statusCoder
	if errors.As(err, &sc) {
		return sc.HTTPStatusCode()
	}
	return 0
}

// apiCode returns the S3 error code of an error reply ("NoSuchKey"), or "".
func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// IsRetryable reports whether err is worth retrying: a transport failure (a
// refused, reset or cut connection, a timeout of one attempt), a 5xx reply,
// 408 Request Timeout, 429 or SlowDown, or 409 ConditionalRequestConflict
// (S3's answer to a conditional write that raced another one for the same
// key). It is false for nil, for the end of the caller's context, for
// ErrConflict and ErrNotFound, and for every other 4xx reply (permanent:
// bad credentials, a missing bucket, an invalid request).
//
// A retryable error from a write leaves its outcome unknown: the server may
// have applied it before the reply was lost.
func IsRetryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, checkpoint.ErrConflict) || errors.Is(err, checkpoint.ErrNotFound) {
		return false
	}
	switch s := status(err); {
	case s >= 500, s == 408, s == 429:
		return true
	case s == 409:
		return apiCode(err) == "ConditionalRequestConflict"
	case s != 0:
		return apiCode(err) == "SlowDown" || apiCode(err) == "RequestTimeout"
	}
	return netfail.Is(err)
}

// isPrecondition reports whether err is S3's refusal of a condition: 412
// Precondition Failed (If-None-Match: * over an existing key, If-Match
// against another ETag).
func isPrecondition(err error) bool {
	return status(err) == 412 || apiCode(err) == "PreconditionFailed"
}

// isNotFound reports whether err says the key (or the multipart upload) does
// not exist.
func isNotFound(err error) bool {
	switch apiCode(err) {
	case "NoSuchKey", "NotFound", "NoSuchUpload":
		return true
	}
	return status(err) == 404
}

// Retryable is IsRetryable.
//
// Deprecated: use IsRetryable, as chsink and kafkasource name it.
func Retryable(err error) bool { return IsRetryable(err) }
