package testenv

import (
	"testing"

	"github.com/exactlyonce/exactlyonce/testkit"
)

// Environment variables that point tests at an external S3-compatible
// server: the test kit's.
const (
	EnvS3Endpoint        = testkit.EnvS3Endpoint
	EnvS3AccessKeyID     = testkit.EnvS3AccessKeyID
	EnvS3SecretAccessKey = testkit.EnvS3SecretAccessKey
	EnvS3Region          = testkit.EnvS3Region
	EnvS3Bucket          = testkit.EnvS3Bucket
)

// S3Config is where a test keeps its objects; see testkit.S3Config.
type S3Config = testkit.S3Config

// S3Server is a dedicated versitygw a test may kill and start again; see
// testkit.S3Server.
type S3Server = testkit.S3Server

// S3 returns a fresh bucket for this test; see testkit.S3.
func S3(t testing.TB) S3Config {
	t.Helper()
	return testkit.S3(t)
}

// StartS3 starts a dedicated versitygw for this test; see testkit.StartS3.
func StartS3(t testing.TB) *S3Server {
	t.Helper()
	return testkit.StartS3(t)
}
