package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pipeline:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("pipeline", flag.ContinueOnError)
	var cfg demoConfig
	fs.IntVar(&cfg.Events, "events", 4000, "webhooks the providers send")
	fs.IntVar(&cfg.Orgs, "orgs", 12, "organisations (the partitioning key)")
	fs.IntVar(&cfg.Partitions, "partitions", 4, "partitions of the Kafka topic")
	fs.IntVar(&cfg.Instances, "instances", 1, "processor instances in one consumer group (more than 1 needs -kill-kafka=false)")
	fs.IntVar(&cfg.Kills, "kills", 3, "times the stream processor is killed with SIGKILL")
	fs.BoolVar(&cfg.KillClickHouse, "kill-clickhouse", true, "kill the embedded ClickHouse with SIGKILL once and restart it")
	fs.BoolVar(&cfg.KillKafka, "kill-kafka", true, "kill the embedded Kafka broker with SIGKILL once and restart it")
	fs.BoolVar(&cfg.Faults, "faults", true, "inject Kafka publish failures and duplicate deliveries")
	fs.StringVar(&cfg.Store, "store", "memory", "where the gateway keeps idempotency keys: memory or redis")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the generated events and faults")
	fs.StringVar(&cfg.Dir, "dir", "", "state directory (default: a new temporary directory)")
	fs.BoolVar(&cfg.Verbose, "v", false, "log the processor's warnings")
	fs.StringVar(&cfg.Checkpoints, "checkpoints", "fs", "where processors keep checkpoints and sink journals: fs (a local directory) or s3 ($S3_ENDPOINT or an embedded versitygw)")
	role := fs.String("role", "demo", "internal: demo or processor")
	var proc processorConfig
	var brokers string
	fs.StringVar(&brokers, "brokers", "", "internal: Kafka brokers of the processor")
	fs.StringVar(&proc.Topic, "topic", "", "internal")
	fs.StringVar(&proc.Group, "group", "", "internal")
	fs.StringVar(&proc.CHAddr, "clickhouse", "", "internal")
	fs.StringVar(&proc.Database, "database", "", "internal")
	fs.StringVar(&proc.DLQ, "dlq", "", "internal")
	fs.StringVar(&proc.StateDir, "state", "", "internal")
	fs.StringVar(&proc.S3.Endpoint, "s3-endpoint", "", "internal")
	fs.StringVar(&proc.S3.Bucket, "s3-bucket", "", "internal")
	groupSuffix := fs.String("group-suffix", "", "internal")
	if err := fs.Parse(args); err != nil {
		return err
	}
	level := slog.LevelError
	if cfg.Verbose {
		level = slog.LevelWarn
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	switch *role {
	case "processor":
		proc.Brokers = strings.Split(brokers, ",")
		if *groupSuffix != "" {
			proc.Group += "-" + *groupSuffix
		}
		proc.Logger = logger.With("process", "processor", "pid", os.Getpid())
		err := runProcessor(ctx, proc)
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	case "demo":
		cfg.Logger = logger
		return runDemo(ctx, cfg)
	default:
		return fmt.Errorf("unknown -role %q", *role)
	}
}
