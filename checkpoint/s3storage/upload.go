// Uploads: one conditional PutObject for a small blob, a multipart upload
// with a conditional completion for a large one.

package s3storage

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// write uploads data under name with cond, in one PUT or in parts. It
// reports whether a failed attempt may have been applied.
func (s *Storage) write(ctx context.Context, name string, data []byte, cond condition) (checkpoint.Version, bool, error) {
	if len(data) >= s.opts.MultipartThreshold && len(data) > 0 {
		return s.writeMultipart(ctx, name, data, cond)
	}
	var etag string
	ambiguous, err := s.retry(ctx, func(ctx context.Context) error {
		out, err := s.client.PutObject(ctx, &s3.PutObjectInput{
			Bucket:        &s.bucket,
			Key:           aws.String(s.key(name)),
			Body:          bytes.NewReader(data),
			ContentLength: aws.Int64(int64(len(data))),
			IfNoneMatch:   cond.ifNoneMatch,
			IfMatch:       cond.ifMatch,
		}, noRetry)
		if err != nil {
			return err
		}
		etag = aws.ToString(out.ETag)
		return nil
	})
	return checkpoint.Version(etag), ambiguous, err
}

// writeMultipart uploads data in parts, completing the upload with cond:
// the object appears only at completion, whole, and only if cond holds then
// (S3 and versitygw evaluate If-None-Match and If-Match on
// CompleteMultipartUpload). An upload that fails is aborted.
func (s *Storage) writeMultipart(ctx context.Context, name string, data []byte, cond condition) (_ checkpoint.Version, ambiguous bool, err error) {
	key := s.key(name)
	var uploadID string
	if _, err := s.retry(ctx, func(ctx context.Context) error {
		out, err := s.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &s.bucket, Key: &key}, noRetry)
		if err != nil {
			return err
		}
		uploadID = aws.ToString(out.UploadId)
		return nil
	}); err != nil {
		return "", false, err // an upload nobody knows of publishes nothing
	}
	completed := false
	defer func() {
		if completed {
			return
		}
		// Abort even when ctx has ended, so the parts do not linger.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_, _ = s.client.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{Bucket: &s.bucket, Key: &key, UploadId: &uploadID}, noRetry)
	}()
	parts, err := s.uploadParts(ctx, key, uploadID, data)
	if err != nil {
		return "", false, err // parts are invisible until completion
	}
	var etag string
	ambiguous, err = s.retry(ctx, func(ctx context.Context) error {
		out, err := s.client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
			Bucket: &s.bucket, Key: &key, UploadId: &uploadID,
			MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
			IfNoneMatch:     cond.ifNoneMatch,
			IfMatch:         cond.ifMatch,
		}, noRetry)
		if err != nil {
			return err
		}
		etag = aws.ToString(out.ETag)
		return nil
	})
	if err == nil {
		completed = true
	} else if ambiguous && apiCode(err) == "NoSuchUpload" {
		// An earlier attempt completed the upload and its reply was lost.
		completed = true
	}
	return checkpoint.Version(etag), ambiguous, err
}

// uploadParts uploads data in parts of PartSize, PartConcurrency at a time,
// each retried on its own. The first part that fails for good cancels the
// others.
func (s *Storage) uploadParts(ctx context.Context, key, uploadID string, data []byte) ([]types.CompletedPart, error) {
	n := (len(data) + s.opts.PartSize - 1) / s.opts.PartSize
	parts := make([]types.CompletedPart, n)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	sem := make(chan struct{}, s.opts.PartConcurrency)
	for i := 0; i < n && ctx.Err() == nil; i++ {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			part := data[i*s.opts.PartSize : min((i+1)*s.opts.PartSize, len(data))]
			num := aws.Int32(int32(i + 1))
			_, err := s.retry(ctx, func(ctx context.Context) error {
				out, err := s.client.UploadPart(ctx, &s3.UploadPartInput{
					Bucket: &s.bucket, Key: &key, UploadId: &uploadID, PartNumber: num,
					Body: bytes.NewReader(part), ContentLength: aws.Int64(int64(len(part))),
				}, noRetry)
				if err != nil {
					return err
				}
				parts[i] = types.CompletedPart{ETag: out.ETag, PartNumber: num}
				return nil
			})
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = fmt.Errorf("part %d: %w", i+1, err)
				}
				mu.Unlock()
				cancel()
			}
		})
	}
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	return parts, firstErr
}

// Create implements checkpoint.Storage with If-None-Match: * on the PUT (or
// on CompleteMultipartUpload). When an attempt's reply was lost and a retry
// is refused, Create reads the object back: if it holds exactly data, the
// lost attempt won and Create succeeds; otherwise the error wraps
// ErrOutcomeUnknown.
