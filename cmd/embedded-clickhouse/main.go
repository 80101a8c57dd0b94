// Command embedded-clickhouse serves the embedded ClickHouse 26.7 that the
// test kit uses (clickhouse-local from libchdb.so, native TCP protocol) on
// a port, for a developer who wants one outside tests:
//
//	go run github.com/exactlyonce/exactlyonce/cmd/embedded-clickhouse -port 9000 -dir ./chdata
//
// The first run on a machine downloads the library with npm (178 MB) and
// builds a small cgo launcher, printing progress; it needs npm, a C
// compiler and the Go toolchain. Connect as user "default" without
// password. It runs until SIGINT or SIGTERM and keeps its data in -dir
// (default: a temporary directory removed on exit).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/embedded"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "embedded-clickhouse:", err)
		os.Exit(1)
	}
}

func run() error {
	port := flag.Int("port", 9000, "native TCP port on 127.0.0.1 (0: a free one)")
	dir := flag.String("dir", "", "data directory, kept on exit (default: a temporary one, removed on exit)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	srv, err := embedded.StartClickHouse(ctx, embedded.ClickHouseOptions{
		Port: *port, Dir: *dir, Logger: log, Progress: os.Stderr,
	})
	if err != nil {
		return err
	}
	fmt.Printf("ClickHouse %s serving the native protocol on %s (data in %s); Ctrl-C stops it\n",
		srv.Version(), srv.Addr(), srv.Dir())
	// Watch for the server exiting on its own: start it again on the same
	// data, as a service manager would.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			log.Info("stopping")
			return srv.Stop() // removes the directory only if it made it
		case <-tick.C:
		}
		if err := srv.Crashed(); err != nil {
			log.Warn("clickhouse exited on its own; starting it again", "err", err)
			if _, err := srv.EnsureRunning(ctx); err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
		}
	}
}
