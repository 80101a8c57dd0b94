package embedded

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writeTgz writes a gzipped tarball holding files (name -> content).
func writeTgz(t *testing.T, path string, files map[string]string) {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for name, content := range files {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(content)), Typeflag: tar.TypeReg}))
		_, err := tw.Write([]byte(content))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	require.NoError(t, zw.Close())
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
}

func TestExtractLib(t *testing.T) {
	tests := []struct {
		name    string
		give    map[string]string
		want    string
		wantErr error
	}{
		{
			name: "library among other files",
			give: map[string]string{"package/index.js": "x", "package/libchdb.so": "ELF library bytes"},
			want: "ELF library bytes",
		},
		{
			name:    "no library",
			give:    map[string]string{"package/index.js": "x"},
			wantErr: ErrNotInstalled,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tgz := filepath.Join(dir, "p.tgz")
			writeTgz(t, tgz, tt.give)
			dst := filepath.Join(dir, "libchdb.so")

			err := extractLib(tgz, dst)
			if tt.wantErr != nil {
				assert.ErrorIs(t, err, tt.wantErr)
				assert.NoFileExists(t, dst, "a failed extract leaves nothing")
				leftovers, _ := filepath.Glob(filepath.Join(dir, ".libchdb-*"))
				assert.Empty(t, leftovers)
				return
			}
			require.NoError(t, err)
			got, err := os.ReadFile(dst)
			require.NoError(t, err)
			assert.Equal(t, tt.want, string(got))

			var viaGo bytes.Buffer
			require.NoError(t, extractWithGo(tgz, &viaGo))
			assert.Equal(t, tt.want, viaGo.String(), "the Go fallback extracts the same bytes")
		})
	}
}

// TestEnsureChDBConcurrent proves concurrent callers share one extraction
// and all get the complete library, without npm when the tarball is cached.
func TestEnsureChDBConcurrent(t *testing.T) {
	SkipShort(t)
	cache := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(cache, "chdb"), 0o755))
	writeTgz(t, filepath.Join(cache, "chdb", chdbTarball(ChDBVersion)), map[string]string{"package/libchdb.so": "lib"})

	var wg sync.WaitGroup
	paths := make([]string, 4)
	errs := make([]error, 4)
	for i := range paths {
		wg.Go(func() { paths[i], errs[i] = EnsureChDB(context.Background(), cache) })
	}
	wg.Wait()
	want := filepath.Join(cache, "chdb", "libchdb-"+ChDBVersion+".so")
	for i := range paths {
		require.NoError(t, errs[i])
		assert.Equal(t, want, paths[i])
	}
	got, err := os.ReadFile(want)
	require.NoError(t, err)
	assert.Equal(t, "lib", string(got))
}

func TestTailBuffer(t *testing.T) {
	b := &tailBuffer{limit: 5}
	_, _ = b.Write([]byte("abc"))
	_, _ = b.Write([]byte("defg"))
	assert.Equal(t, "cdefg", b.String())
}

// TestEnsureChDBOtherVersion: $EXACTLYONCE_CLICKHOUSE picks another
// version of the package, cached under its own names beside the default.
func TestEnsureChDBOtherVersion(t *testing.T) {
	SkipShort(t)
	cache := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(cache, "chdb"), 0o755))
	const other = "26.7.0-stable.1"
	writeTgz(t, filepath.Join(cache, "chdb", "chdb-lib-linux-x64-gnu-"+other+".tgz"), map[string]string{"package/libchdb.so": "other"})
	t.Setenv(EnvClickHouse, other)
	got, err := EnsureChDB(context.Background(), cache)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(cache, "chdb", "libchdb-"+other+".so"), got)
	b, err := os.ReadFile(got)
	require.NoError(t, err)
	assert.Equal(t, "other", string(b))
}
