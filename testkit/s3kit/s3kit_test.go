package s3kit_test

import (
	"io"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/testkit/s3kit"
)

// TestBucket proves the bucket the kit hands out takes and returns objects.
func TestBucket(t *testing.T) {
	c := s3kit.Bucket(t)
	cl := c.Client()
	key := c.Prefix + "k"
	_, err := cl.PutObject(t.Context(), &s3.PutObjectInput{Bucket: &c.Bucket, Key: &key, Body: strings.NewReader("v")})
	require.NoError(t, err)
	out, err := cl.GetObject(t.Context(), &s3.GetObjectInput{Bucket: &c.Bucket, Key: &key})
	require.NoError(t, err)
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	require.NoError(t, err)
	assert.Equal(t, "v", string(b))
}
