package chsink_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ClickHouse/ch-go"
	"github.com/stretchr/testify/require"
)

var dbSeq atomic.Int64

// clickHouse is a stand-in for testenv.ClickHouse until it lands.
func clickHouse(t testing.TB) (string, string) {
	addr := os.Getenv("CLICKHOUSE_ADDR")
	if addr == "" {
		t.Skip("CLICKHOUSE_ADDR not set")
	}
	db := fmt.Sprintf("t_%s_%d_%d", strings.ToLower(strings.NewReplacer("/", "_", "-", "_").Replace(t.Name())), os.Getpid(), dbSeq.Add(1))
	ctx := context.Background()
	c, err := ch.Dial(ctx, ch.Options{Address: addr})
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Do(ctx, ch.Query{Body: "CREATE DATABASE " + db}))
	t.Cleanup(func() {
		c, err := ch.Dial(context.Background(), ch.Options{Address: addr})
		if err == nil {
			_ = c.Do(context.Background(), ch.Query{Body: "DROP DATABASE IF EXISTS " + db})
			_ = c.Close()
		}
	})
	return addr, db
}
