// Command chaos runs the pipeline under a long randomized schedule of faults
// (make chaos) and checks every figure against the ground truth: the
// gateway and processor binaries of examples/ on embedded ClickHouse, Kafka,
// Redis and S3, with processors, the gateway, Redis, the broker, ClickHouse
// and S3 killed at the joints that matter, the broker failing single
// requests, processors frozen past their group's session timeout,
// ClickHouse slowed and written to by another writer, the processors'
// clock jumping, and a transactional writer of its own held past its
// transaction timeout. It records the run's history (-history keeps it)
// and checks it for lost writes, duplicates, aborted reads and bad polls.
// It prints a live progress line, the faults as they strike, and a closing
// table; it exits 1 on any difference or finding and prints the seed that
// replays the schedule. See harness/internal/chaos; -h lists the flags.
// CLICKHOUSE_ADDR, KAFKA_BROKERS, REDIS_ADDR and S3_ENDPOINT point it at
// servers of your own, which it uses and never kills: the fault kinds
// aimed at them are left out.
//
//	go run ./harness/cmd/chaos -events 20000 -faults-per-kind 10
//	go run ./harness/cmd/chaos -events 1000000 -faults-per-kind 200 -json chaos.json
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/exactlyonce/exactlyonce/harness/internal/chaos"
	"github.com/exactlyonce/exactlyonce/harness/internal/demo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	var cfg chaos.Config
	var kinds string
	fs.IntVar(&cfg.Events, "events", 20000, "webhooks the providers send")
	fs.DurationVar(&cfg.Duration, "duration", 0, "spread the deliveries over at least this long (0: as fast as the pipeline and the faults go)")
	fs.Uint64Var(&cfg.Seed, "seed", uint64(time.Now().UnixNano()), "seed of the events and of the fault schedule (default: random, printed)")
	fs.IntVar(&cfg.Instances, "instances", 2, "processor instances in one consumer group")
	fs.IntVar(&cfg.FaultsPerKind, "faults-per-kind", 10, "faults of each kind (0: draw faults until the deliveries are done)")
	fs.DurationVar(&cfg.FaultInterval, "fault-interval", 300*time.Millisecond, "mean pause between two faults")
	fs.StringVar(&kinds, "kinds", "", "comma-separated fault kinds (default: all the configuration allows): "+strings.Join(chaos.Kinds(), ","))
	fs.IntVar(&cfg.Orgs, "orgs", 12, "organisations (the partitioning key)")
	fs.IntVar(&cfg.Partitions, "partitions", 4, "partitions of the Kafka topic")
	fs.StringVar(&cfg.Checkpoints, "checkpoints", "fs", "where processors keep checkpoints: fs or s3 (an embedded versitygw; adds the s3-kill fault)")
	fs.StringVar(&cfg.Kafka, "kafka", demo.KafkaFake, "the embedded broker, unless KAFKA_BROKERS names yours: kfake (with its wire-level fault kinds), apache (Apache Kafka 4.4), apache-3.9 or cluster (three Apache Kafka brokers and a controller, with the kafka-broker-kill, kafka-isr-down and kafka-rolling-restart kinds)")
	fs.StringVar(&cfg.GroupProtocol, "group-protocol", "classic", "consumer group protocol of the processors: classic, or consumer (KIP-848; Apache Kafka 4: -kafka apache or cluster, or KAFKA_BROKERS)")
	fs.StringVar(&cfg.JSON, "json", "", "write the result as JSON to this file")
	fs.BoolVar(&cfg.KafkaSink, "kafkasink", false, "add a transactional leg to the processors: every record they process written again to <topic>_out through a kafkasink.Sink, checked exactly once by the history; processor-pause-checkpoint then pauses past its transaction timeout (Apache Kafka only: -kafka apache, apache-3.9 or cluster)")
	fs.StringVar(&cfg.History, "history", "", "write the run's history (sends, transactions, polls, commits, final reads; one JSON operation a line) to this file as the run goes (default: none; a failing run writes it to the temporary directory and names it)")
	fs.StringVar(&cfg.Dir, "dir", "", "state directory (default: a new temporary directory)")
	fs.StringVar(&cfg.LogDir, "logs", "", "keep each binary's log (level info, one file per process) in this directory (default: <dir>/logs, or a new temporary directory, kept and named at the end)")
	fs.BoolVar(&cfg.Verbose, "v", false, "the binaries log warnings, not only errors")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if kinds != "" {
		cfg.Kinds = strings.Split(kinds, ",")
	}
	level := slog.LevelError
	if cfg.Verbose {
		level = slog.LevelWarn
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	_, err := chaos.Run(ctx, cfg)
	return err
}
