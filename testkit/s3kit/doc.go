// Package s3kit gives tests an S3 bucket on a real S3-compatible server
// (versitygw, started per test) or on yours, for checkpoint/s3storage. It
// is testkit's S3 part, a package of its own so that a module importing
// testkit alone does not pull in the AWS SDK.
//
//	c := s3kit.Bucket(t)        // a fresh bucket; c.Client() is an S3 client
//	srv := s3kit.Start(t)       // a dedicated versitygw: Kill, Start
//	c2 := srv.NewBucket(t)
//
// # Guarantees
//
// As testkit's: a server that cannot start skips the test, or fails it
// when CI=true; every process is stopped at cleanup; Kill is SIGKILL and
// objects survive it.
package s3kit
