// Package s3storage keeps checkpoints and journals in an S3-compatible
// object store (AWS S3, versitygw, ...) as a checkpoint.Storage, so
// that processors on different machines share them and fence each other with
// conditional writes.
//
//	client := s3storage.NewClient(s3storage.ClientConfig{Endpoint: "http://s3:7070", AccessKeyID: id, SecretAccessKey: secret})
//	storage, err := s3storage.New(client, "pipeline", s3storage.Options{Prefix: "prod/"})
//	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
//
// Each name is one object, key Options.Prefix+name. Create is a PUT with
// If-None-Match: *, Replace a PUT with If-Match: <ETag>, and the ETag is the
// Version. Blobs of Options.MultipartThreshold bytes or more (a dedup state
// of 10 M keys is about 200 MB) are uploaded in parts and appear only when
// CompleteMultipartUpload succeeds, which carries the same condition: the
// server evaluates it atomically at completion (AWS S3 does, and so does
// versitygw v1.8.0, the version the tests run: its posix backend re-checks the condition under a
// per-object publish lock just before linking the assembled object). A
// refused or failed upload is aborted.
//
// Parts upload Options.PartConcurrency at a time. Every request is retried
// on its own (a part of a multipart upload, a page
// of a listing) up to Options.MaxAttempts times, with jittered exponential
// backoff, when Retryable says the error is transient; the SDK's own retries
// are off, so Storage knows when a write's outcome became uncertain.
//
// # Client library
//
// The AWS SDK for Go v2 (service/s3). Its PutObjectInput and
// CompleteMultipartUploadInput carry IfNoneMatch and IfMatch as typed
// fields, multipart uploads are explicit calls (so the condition goes on the
// completion, and a part is retried alone), its errors expose the HTTP
// status and S3 error code that the classifier needs, and AWS maintains it
// with the service. minio-go also sends conditional headers, but through
// generic options, and hides multipart behind PutObject, so a conditional
// completion and per-part retries would need its lower-level Core API.
// Built from s3.Options with static credentials (NewClient), the SDK pulls
// no config or SSO modules.
//
// # Errors
//
// Match them with errors.Is:
//
//   - [ErrInvalidOptions] is wrapped by New's error for options it refuses.
//   - [ErrOutcomeUnknown] is wrapped by the error of a conditional write
//     whose outcome the storage could not resolve: an attempt may have been
//     applied (its reply was lost), a retry was refused by the condition,
//     and reading the object back did not show this write's content.
//
// # Guarantees
//
//   - Put, Create and Replace are atomic: a reader sees the old object or the
//     whole new one, never a part, also when the server or the writer dies
//     mid-upload. A write that returned nil is durable to the degree the
//     server's PUT is: AWS S3 stores it redundantly before replying;
//     versitygw v1.8.0's posix backend does not fsync, so its objects
//     survive a kill of the server (tested) but not necessarily a power loss
//     of its machine.
//   - Of concurrent Creates of one name from any machine, exactly one
//     succeeds; Replace applies only over the ETag it was given. The loser
//     gets an error wrapping checkpoint.ErrConflict, and nothing changed.
//   - A conditional write retried after a lost reply, whose retry the server
//     refuses, is resolved by reading the object back: if it holds exactly
//     the data written, the write succeeded; otherwise the error wraps
//     ErrOutcomeUnknown (it may have been applied and replaced since, or
//     never applied), never ErrConflict. Any other failure after a request
//     may have reached the server also wraps ErrOutcomeUnknown; a failure
//     without it was certainly not applied.
//   - List is read-after-write consistent where the server is (S3 since
//     2020, versitygw on a POSIX filesystem).
//
// What it assumes: the server evaluates If-None-Match and If-Match on
// PutObject and CompleteMultipartUpload atomically (AWS S3 since 2024,
// versitygw v1.8.0). A server that ignores the headers would make
// every conditional write succeed: run checkpointtest's race tests against
// it before relying on it. ETags, like the filesystem's content hashes,
// repeat for identical single-part content; see checkpoint.Version.
package s3storage
