// Command exactlyonce is the operator's command line of the SDK: it
// audits a running pipeline on its own servers and looks at a partition's
// checkpoints, sink journals and lag without writing Go.
//
//	exactlyonce audit -clickhouse ch:9000 -database webhooks -since 2h \
//		-table normalized_events,tenant=org_id,time=event_time \
//		[-brokers kafka:9092 -scan-topic webhooks -scan-table normalized_events -scan-id event_id]
//	exactlyonce checkpoints -state-dir /var/lib/processor -topic webhooks -partition 3
//	exactlyonce show -state-dir /var/lib/processor -topic webhooks -partition 3 [-id 120]
//	exactlyonce lag -brokers kafka:9092 -group processor -topic webhooks -state-dir /var/lib/processor
//	exactlyonce verify -state-dir /var/lib/processor -topic webhooks
//	exactlyonce rewind -state-dir /var/lib/processor -topic webhooks -partition 3 -to 118 \
//		-brokers kafka:9092 -group processor [-yes]
//	exactlyonce txn list -brokers kafka:9092 [-prefix processor-out] [-all]
//	exactlyonce txn describe -brokers kafka:9092 processor-out-webhooks-3
//	exactlyonce txn abort -brokers kafka:9092 processor-out-webhooks-3 [-yes]
//
// audit compares the stages' counts per tenant and event-time bucket (see
// package audit) and exits 1 when a settled bucket differs: lost or
// duplicated events; with -scan-topic it also reads the topic and the
// table by event id and names the ids lost or duplicated, one part of the
// id space at a time (-scan-shards bounds its memory). Every command but
// rewind and txn abort is read-only; -s3-bucket (with the S3_ENDPOINT, S3_ACCESS_KEY_ID
// and S3_SECRET_ACCESS_KEY of the processor) reads checkpoints kept in S3
// instead of -state-dir.
//
// txn lists the transactional ids with a transaction open (or, with
// -all, every one), with the transaction's age and partitions: an open
// transaction pins the last stable offset of its partitions, so
// read_committed readers see nothing past it. txn abort -yes aborts one
// left open by a dead producer the way a new producer of the id would
// (InitProducerId: the coordinator aborts it and fences the old epoch).
//
// rewind is the other command that writes, also only with -yes (without it,
// it prints what it would do): it makes an older checkpoint of a partition
// the newest, so the next processor restores from it and replays. It is
// fenced like an owner: it refuses while the processors' consumer group
// has a member, and claims the partition's sink journals before it deletes
// anything, so a processor that still runs unseen cannot insert.
//
// Exit status: 0 all well, 1 a difference or a damaged checkpoint found, 2
// the command could not run (bad flags, a server unreachable, a table
// without the audit schema, a damaged or pruned rewind target), 3 rewind
// refused because the consumer group has live members.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// Exit statuses.
const (
	exitOK         = 0
	exitDifference = 1 // the command ran and found something wrong
	exitError      = 2 // the command could not run
	exitRefused    = 3 // a writing command refused: the partition may be live
)

// errFound is returned by a command that ran and found a difference or
// damage (already printed): exit status 1.
var errFound = errors.New("found")

type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, env func(string) string, stdout io.Writer) error
}

func commands() []command {
	return []command{
		{"audit", "compare the pipeline's stages per tenant and event-time bucket", runAudit},
		{"checkpoints", "list a partition's checkpoints", runCheckpoints},
		{"show", "decode one checkpoint: dedup keys, windows, sink journals, audit counts", runShow},
		{"lag", "consumer lag per partition beside its last checkpoint's age", runLag},
		{"verify", "check every checkpoint and sink journal of a topic is intact", runVerify},
		{"rewind", "make an older checkpoint of a partition its newest (writes; fenced against live processors)", runRewind},
		{"txn", "list, describe or abort (writes, with -yes) Kafka transactions that pin the last stable offset", runTxn},
	}
}

func run(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) int {
	usage := func() {
		fmt.Fprintln(stderr, "usage: exactlyonce <command> [flags]; commands:")
		for _, c := range commands() {
			fmt.Fprintf(stderr, "  %-12s %s\n", c.name, c.summary)
		}
		fmt.Fprintln(stderr, "exactlyonce <command> -h lists its flags")
	}
	if len(args) == 0 {
		usage()
		return exitError
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], env, stdout)
		switch {
		case err == nil:
			return exitOK
		case errors.Is(err, errFound):
			return exitDifference
		case errors.Is(err, flag.ErrHelp):
			return exitError
		case errors.Is(err, errLive):
			fmt.Fprintf(stderr, "exactlyonce %s: %v\n", c.name, err)
			return exitRefused
		}
		fmt.Fprintf(stderr, "exactlyonce %s: %v\n", c.name, err)
		return exitError
	}
	fmt.Fprintf(stderr, "exactlyonce: unknown command %q\n", args[0])
	usage()
	return exitError
}

// newFlags returns a flag set whose errors and help go to stderr of the
// process (flag's default), named after the command.
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("exactlyonce "+name, flag.ContinueOnError)
	return fs
}

// envOr returns env(name), or def when it is empty.
func envOr(env func(string) string, name, def string) string {
	if v := env(name); v != "" {
		return v
	}
	return def
}
