// Command fetchkafka fetches the Apache Kafka releases the tests run (their
// jars, with Maven, into the cache) and builds the Java clients program of
// the interop tests (internal/kafkajava), so the first test does not wait
// for them. `make deps` runs it.
//
//	go run ./harness/cmd/fetchkafka            # 4.4.0, 4.2.2, 4.0.2 and 3.9.2, and the Java clients
//	go run ./harness/cmd/fetchkafka 3.9.2      # just that one
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"github.com/exactlyonce/exactlyonce/internal/embedded"
	"github.com/exactlyonce/exactlyonce/internal/kafkajava"
)

func main() {
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: fetchkafka [version ...] (default %s)\n", strings.Join(embedded.ApacheKafkaVersions, " "))
	}
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "fetchkafka:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, versions []string) error {
	if len(versions) == 0 {
		versions = embedded.ApacheKafkaVersions
		if _, err := kafkajava.Build(ctx, os.Stderr); err != nil {
			return err
		}
		fmt.Println("fetchkafka: Kafka's Java clients and tools built (internal/kafkajava)")
	}
	for _, v := range versions {
		dir, err := embedded.EnsureApacheKafka(ctx, "", v, os.Stderr)
		if err != nil {
			return err
		}
		fmt.Printf("fetchkafka: Apache Kafka %s in %s\n", v, dir)
	}
	return nil
}
