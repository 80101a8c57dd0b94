package embedded

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"
)

// chVersion connects with ch-go, pings, and reads version().
func chVersion(ctx context.Context, addr string) (string, error) {
	if err := dialOK(ctx, addr); err != nil {
		return "", err
	}
	client, err := ch.Dial(ctx, ch.Options{Address: addr, DialTimeout: 5 * time.Second})
	if err != nil {
		return "", err
	}
	defer client.Close()
	if err := client.Ping(ctx); err != nil {
		return "", err
	}
	var col proto.ColStr
	if err := client.Do(ctx, ch.Query{
		Body:   "SELECT version()",
		Result: proto.Results{{Name: "version()", Data: &col}},
	}); err != nil {
		return "", err
	}
	if col.Rows() != 1 {
		return "", fmt.Errorf("version(): %d rows", col.Rows())
	}
	return col.Row(0), nil
}

// sweepStaleDirs removes data directories named prefix* this package
// created in earlier runs whose owner process is gone (killed test binaries
// leave them).
func sweepStaleDirs(prefix string) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+"*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(d)
		}
	}
}
