package kafkapub_test

import (
	"bytes"
	"io"
	"testing"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/testkit/webhookkit"
)

// BenchmarkCompression compresses every example payload of GitHub's
// @octokit/webhooks-examples one by one, as the writer compresses a batch of
// one large delivery, with each codec kafka-go offers (at its default level),
// and reports the ratio (uncompressed / compressed bytes) beside the time:
//
//	go test -run XXX -bench Compression -count 5 ./idempotency/kafkapub/
//
// "large" is the same on the examples joined into payloads of about 2 MiB,
// what a large push or pull request looks like to the codec (long repeated
// field names, URLs and SHAs).
func BenchmarkCompression(b *testing.B) {
	examples := webhookkit.GitHubExamples(b)
	var small [][]byte
	var total int
	for _, ex := range examples {
		small = append(small, ex.Body)
		total += len(ex.Body)
	}
	var large [][]byte
	var cur []byte
	for i := 0; len(large) < 4; i++ {
		cur = append(cur, examples[i%len(examples)].Body...)
		if len(cur) >= 2<<20 {
			large, cur = append(large, cur), nil
		}
	}
	for _, set := range []struct {
		name     string
		payloads [][]byte
	}{{"octokit", small}, {"large", large}} {
		for _, c := range []struct {
			name  string
			codec kafka.Compression
		}{{"none", 0}, {"snappy", kafka.Snappy}, {"lz4", kafka.Lz4}, {"zstd", kafka.Zstd}, {"gzip", kafka.Gzip}} {
			b.Run(set.name+"/"+c.name, func(b *testing.B) {
				var in, out int64
				var buf bytes.Buffer
				for _, p := range set.payloads {
					in += int64(len(p))
				}
				b.SetBytes(in)
				b.ReportAllocs()
				for b.Loop() {
					out = 0
					for _, p := range set.payloads {
						if c.codec == 0 {
							out += int64(len(p))
							continue
						}
						buf.Reset()
						w := c.codec.Codec().NewWriter(&buf)
						_, err := w.Write(p)
						require.NoError(b, err)
						require.NoError(b, w.Close())
						out += int64(buf.Len())
					}
				}
				b.ReportMetric(float64(in)/float64(out), "ratio")
				// Decompression, what every consumer pays per record.
				if c.codec != 0 {
					buf.Reset()
					w := c.codec.Codec().NewWriter(&buf)
					_, _ = w.Write(set.payloads[0])
					_ = w.Close()
					r := c.codec.Codec().NewReader(bytes.NewReader(buf.Bytes()))
					_, err := io.Copy(io.Discard, r)
					require.NoError(b, err)
					_ = r.Close()
				}
			})
		}
	}
}
