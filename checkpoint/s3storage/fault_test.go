package s3storage_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/checkpointtest"
	"github.com/exactlyonce/exactlyonce/checkpoint/s3storage"
	"github.com/exactlyonce/exactlyonce/testkit/s3kit"
)

// The whole suite again with every non-empty blob uploaded in parts, so
// conditional completion of multipart uploads is raced too.
func TestStorageMultipart(t *testing.T) {
	srv := s3Server(t)
	checkpointtest.TestStorage(t, func(t *testing.T) checkpoint.Storage {
		return newStorage(t, srv(t), s3storage.Options{MultipartThreshold: 1, PartSize: s3storage.MinPartSize})
	})
}

// A blob of several parts appears whole, conditionally, and a lost
// conditional completion leaves no upload behind.
func TestMultipartLarge(t *testing.T) {
	ctx := context.Background()
	c := s3Server(t)(t)
	s := newStorage(t, c, s3storage.Options{MultipartThreshold: s3storage.MinPartSize, PartSize: s3storage.MinPartSize})
	data := make([]byte, 2*s3storage.MinPartSize+12345)
	_, _ = rand.Read(data)

	v1, err := s.Create(ctx, "big", data)
	require.NoError(t, err)
	assert.True(t, strings.HasSuffix(strings.Trim(string(v1), `"`), "-3"), "a three-part upload's ETag, got %s", v1)
	got, v, err := s.GetVersion(ctx, "big")
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, got), "the blob reads back whole")
	assert.Equal(t, v1, v)

	_, err = s.Create(ctx, "big", data[:s3storage.MinPartSize+1])
	assert.ErrorIs(t, err, checkpoint.ErrConflict, "conditional completion refuses a second Create")
	data2 := append(bytes.Clone(data[:s3storage.MinPartSize]), "tail"...)
	v2, err := s.Replace(ctx, "big", data2, v1)
	require.NoError(t, err)
	_, err = s.Replace(ctx, "big", data, v1)
	assert.ErrorIs(t, err, checkpoint.ErrConflict, "a stale If-Match on completion")
	got, v, err = s.GetVersion(ctx, "big")
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data2, got))
	assert.Equal(t, v2, v)

	ups, err := c.Client().ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(c.Bucket)})
	require.NoError(t, err)
	assert.Empty(t, ups.Uploads, "refused uploads are aborted")
}

// A conditional write whose reply is lost is retried; the retry is refused
// (the first attempt won), and Create reads the object back instead of
// reporting a conflict it did not have.
func TestLostReplyResolved(t *testing.T) {
	ctx := context.Background()
	c := s3Server(t)(t)
	target, err := url.Parse(c.Endpoint)
	require.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var drop atomic.Int32 // conditional PUTs whose reply is dropped
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conditional := r.Header.Get("If-None-Match") != "" || r.Header.Get("If-Match") != ""
		if r.Method == http.MethodPut && conditional && drop.Add(-1) >= 0 {
			rec := httptest.NewRecorder()
			proxy.ServeHTTP(rec, r) // the server applies the write...
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = conn.Close() // ...and the reply never arrives
			}
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()
	c.Endpoint = front.URL
	s := newStorage(t, c, s3storage.Options{InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})

	drop.Store(1)
	v1, err := s.Create(ctx, "owner", []byte("epoch 1 by a"))
	require.NoError(t, err, "the lost attempt created it: Create succeeds")
	assert.NotEmpty(t, v1)

	drop.Store(1)
	v2, err := s.Replace(ctx, "owner", []byte("epoch 2 by a"), v1)
	require.NoError(t, err, "the lost attempt replaced it: Replace succeeds")
	_, v, err := s.GetVersion(ctx, "owner")
	require.NoError(t, err)
	assert.Equal(t, v, v2)

	// Another writer's content after a lost reply: unknown, not a conflict.
	_, err = s.Create(ctx, "other", []byte("by b"))
	require.NoError(t, err)
	_, err = s.Replace(ctx, "other", []byte("by a"), "\"not-the-etag\"")
	assert.ErrorIs(t, err, checkpoint.ErrConflict, "a refused first attempt is a plain conflict")
	drop.Store(1)
	_, err = s.Replace(ctx, "other", []byte("by a"), "\"not-the-etag\"")
	assert.ErrorIs(t, err, s3storage.ErrOutcomeUnknown, "a lost reply, then a refusal, and not our content")
	assert.NotErrorIs(t, err, checkpoint.ErrConflict)
}

// versitygw killed with SIGKILL and started again: writes during the outage
// fail (and store nothing), a multipart upload cut by the kill leaves the
// name empty or whole, and writes after the restart work.
func TestServerKillRestart(t *testing.T) {
	if testenvExternal() {
		t.Skip("needs a server it may kill: runs on the embedded versitygw only")
	}
	ctx := context.Background()
	srv := s3kit.Start(t)
	c := srv.NewBucket(t)
	opts := s3storage.Options{MaxAttempts: 3, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
		MultipartThreshold: s3storage.MinPartSize, PartSize: s3storage.MinPartSize}
	s := newStorage(t, c, opts)
	_, err := s.Create(ctx, "kept", []byte("before"))
	require.NoError(t, err)

	// Kill while a large Create is uploading its parts.
	big := make([]byte, 8*s3storage.MinPartSize)
	_, _ = rand.Read(big)
	done := make(chan error, 1)
	go func() {
		_, err := s.Create(ctx, "big", big)
		done <- err
	}()
	time.Sleep(150 * time.Millisecond)
	srv.Kill()
	bigErr := <-done

	_, _, err = s.GetVersion(ctx, "kept")
	require.Error(t, err, "the server is down")
	assert.NotErrorIs(t, err, checkpoint.ErrNotFound)
	err = s.Put(ctx, "during", []byte("x"))
	require.Error(t, err, "Put during the outage")
	_, err = s.Create(ctx, "during-create", []byte("x"))
	require.Error(t, err, "Create during the outage")
	assert.NotErrorIs(t, err, checkpoint.ErrConflict)
	assert.NotErrorIs(t, err, s3storage.ErrOutcomeUnknown, "a refused connection sent nothing: a definite failure")
	assert.True(t, s3storage.IsRetryable(err) || strings.Contains(err.Error(), "refused"), "%v", err)

	srv.Start()
	got, v, err := s.GetVersion(ctx, "kept")
	require.NoError(t, err)
	assert.Equal(t, []byte("before"), got)
	for _, name := range []string{"during", "during-create"} {
		_, err = s.Get(ctx, name)
		assert.ErrorIs(t, err, checkpoint.ErrNotFound, "%s stored nothing", name)
	}
	got, err = s.Get(ctx, "big")
	if bigErr == nil {
		require.NoError(t, err, "an acknowledged Create survives")
	}
	if err == nil {
		assert.True(t, bytes.Equal(big, got), "a Create cut by the kill is whole or absent, never partial")
	} else {
		assert.ErrorIs(t, err, checkpoint.ErrNotFound)
	}
	t.Logf("Create during the kill: %v", bigErr)

	_, err = s.Replace(ctx, "kept", []byte("after"), v)
	require.NoError(t, err)
	require.NoError(t, s.Put(ctx, "during", []byte("y")))
	_, err = s.Create(ctx, "during-create", []byte("y"))
	require.NoError(t, err)
	names, err := s.List(ctx, "")
	require.NoError(t, err)
	want := []string{"during", "during-create", "kept"}
	if got, _ := s.Get(ctx, "big"); got != nil {
		want = []string{"big", "during", "during-create", "kept"}
	}
	assert.Equal(t, want, names)
}
