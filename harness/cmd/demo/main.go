// Command demo runs the all-in-one demo (make demo): the gateway and the
// processor binaries of examples/ on embedded ClickHouse and Kafka, with
// faults injected at every joint, and checks every figure against the
// ground truth. See package harness/internal/demo; -h lists the flags.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/exactlyonce/exactlyonce/harness/internal/demo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	var cfg demo.Config
	cfg.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	level := slog.LevelError
	if cfg.Verbose {
		level = slog.LevelWarn
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	return demo.Run(ctx, cfg)
}
