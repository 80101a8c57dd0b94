package main

import (
	"context"
	"io"

	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/testkit/s3kit"
)

// TestStateOnS3 checks that -s3-bucket puts the processor's checkpoints in
// the bucket, with the conditional writes that fence a stale owner, and that
// without it they stay in -state-dir.
func TestStateOnS3(t *testing.T) {
	s3 := s3kit.Bucket(t)
	env := map[string]string{
		"S3_ENDPOINT":          s3.Endpoint,
		"S3_REGION":            s3.Region,
		"S3_ACCESS_KEY_ID":     s3.AccessKeyID,
		"S3_SECRET_ACCESS_KEY": s3.SecretAccessKey,
	}
	cfg, err := parse([]string{"-s3-bucket", s3.Bucket, "-s3-prefix", s3.Prefix + "proc/"}, func(k string) string { return env[k] })
	require.NoError(t, err)
	storage, err := openStorage(cfg)
	require.NoError(t, err)

	ctx := context.Background()
	_, err = storage.Create(ctx, "owner", []byte("a"))
	require.NoError(t, err)
	_, err = storage.Create(ctx, "owner", []byte("b"))
	assert.ErrorIs(t, err, checkpoint.ErrConflict, "a second owner record must lose")
	names, err := storage.List(ctx, "")
	require.NoError(t, err)
	assert.Equal(t, []string{"owner"}, names)
	// The object is in the bucket, under the prefix, as another machine
	// would read it.
	obj, err := s3.Client().GetObject(ctx, &awss3.GetObjectInput{Bucket: aws.String(s3.Bucket), Key: aws.String(s3.Prefix + "proc/owner")})
	require.NoError(t, err)
	body, err := io.ReadAll(obj.Body)
	obj.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, "a", string(body))

	dir := t.TempDir()
	cfg, err = parse([]string{"-state-dir", dir}, func(string) string { return "" })
	require.NoError(t, err)
	storage, err = openStorage(cfg)
	require.NoError(t, err)
	fs, ok := storage.(*checkpoint.FSStorage)
	require.True(t, ok, "without -s3-bucket the state stays on the filesystem, got %T", storage)
	assert.Equal(t, dir, fs.Dir())
}
