// Command fetchzookeeper fetches the Apache ZooKeeper release the tests run
// (its jars, with Maven, into the cache), so the first replicated test does
// not wait for them. `make deps` runs it.
//
//	go run ./harness/cmd/fetchzookeeper
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/exactlyonce/exactlyonce/internal/embedded"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	dir, err := embedded.EnsureZooKeeper(ctx, "", os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fetchzookeeper:", err)
		os.Exit(1)
	}
	fmt.Printf("fetchzookeeper: Apache ZooKeeper %s in %s\n", embedded.ZooKeeperVersion, dir)
}
