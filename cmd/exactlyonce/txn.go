package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/exactlyonce/exactlyonce/kafkatxn"
)

// txnRow is one transactional id of txn list and txn describe.
type txnRow struct {
	ID            string           `json:"transactional_id"`
	State         string           `json:"state"`
	ProducerID    int64            `json:"producer_id"`
	ProducerEpoch int16            `json:"producer_epoch"`
	Coordinator   int              `json:"coordinator"`
	Timeout       string           `json:"timeout,omitempty"`
	Started       time.Time        `json:"started,omitzero"`
	Age           string           `json:"age,omitempty"`
	Partitions    map[string][]int `json:"partitions,omitempty"`
}

func rowOf(d kafkatxn.TxnDescription, now time.Time) txnRow {
	r := txnRow{ID: d.TransactionalID, State: d.State, ProducerID: d.ProducerID, ProducerEpoch: d.ProducerEpoch,
		Coordinator: d.Coordinator, Timeout: d.Timeout.String(), Started: d.Started, Partitions: d.Partitions}
	if !d.Started.IsZero() {
		r.Age = now.Sub(d.Started).Round(time.Millisecond).String()
	}
	return r
}

// runTxn lists, describes or aborts transactions: list and describe only
// read; abort writes, and only with -yes.
func runTxn(ctx context.Context, args []string, env func(string) string, stdout io.Writer) error {
	if len(args) == 0 || !slices.Contains([]string{"list", "describe", "abort"}, args[0]) {
		return errors.New("usage: exactlyonce txn list|describe|abort [flags] [transactional ids]")
	}
	sub := args[0]
	fs := newFlags("txn " + sub)
	brokers := fs.String("brokers", envOr(env, "KAFKA_BROKERS", "localhost:9092"), "Kafka bootstrap brokers, comma-separated (KAFKA_BROKERS)")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for Kafka (abort: for the abort to complete)")
	asJSON := fs.Bool("json", false, "print JSON")
	var prefix, state *string
	var all, yes *bool
	switch sub {
	case "list":
		prefix = fs.String("prefix", "", "only transactional ids starting with this (a kafkasink prefix)")
		state = fs.String("state", "", "only ids in these states, comma-separated (Ongoing, PrepareCommit, ...)")
		all = fs.Bool("all", false, "list ids in every state; by default only those with a transaction open")
	case "abort":
		yes = fs.Bool("yes", false, "abort; without it, print what would be aborted")
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	bs := strings.Split(*brokers, ",")
	opts := kafkatxn.TxOptions{ProducerOptions: kafkatxn.ProducerOptions{DeliveryTimeout: *timeout}}
	now := time.Now()
	switch sub {
	case "list":
		f := kafkatxn.ListFilter{Prefix: *prefix}
		switch {
		case *state != "":
			f.States = strings.Split(*state, ",")
		case !*all:
			f.States = []string{kafkatxn.StateOngoing, kafkatxn.StatePrepareCommit, kafkatxn.StatePrepareAbort, kafkatxn.StatePrepareEpochFence}
		}
		ls, err := kafkatxn.ListTransactions(ctx, bs, f, opts)
		if err != nil {
			return err
		}
		ids := make([]string, 0, len(ls))
		for _, l := range ls {
			ids = append(ids, l.TransactionalID)
		}
		// The open ones are described too: their age and partitions say
		// which last stable offsets they pin, and for how long.
		ds, err := kafkatxn.DescribeTransactions(ctx, bs, ids, opts)
		if err != nil {
			return err
		}
		rows := make([]txnRow, 0, len(ds))
		for _, d := range ds {
			rows = append(rows, rowOf(d, now))
		}
		return printTxns(stdout, rows, *asJSON)
	case "describe":
		if fs.NArg() == 0 {
			return errors.New("txn describe: name one or more transactional ids")
		}
		ds, err := kafkatxn.DescribeTransactions(ctx, bs, fs.Args(), opts)
		if err != nil {
			return err
		}
		rows := make([]txnRow, 0, len(ds))
		for _, d := range ds {
			rows = append(rows, rowOf(d, now))
		}
		return printTxns(stdout, rows, *asJSON)
	}
	// abort
	if fs.NArg() != 1 {
		return errors.New("txn abort: name one transactional id")
	}
	id := fs.Arg(0)
	if !*yes {
		ds, err := kafkatxn.DescribeTransactions(ctx, bs, []string{id}, opts)
		if err != nil {
			return err
		}
		if err := printTxns(stdout, []txnRow{rowOf(ds[0], now)}, *asJSON); err != nil {
			return err
		}
		if !ds[0].Open() {
			return fmt.Errorf("%s: %w", id, kafkatxn.ErrNoOpenTransaction)
		}
		fmt.Fprintf(stdout, "would abort the open transaction of %s (its records are lost; a producer of the id still running is fenced); rerun with -yes\n", id)
		return nil
	}
	d, err := kafkatxn.AbortTransaction(ctx, bs, id, opts)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "aborted the transaction of %s (producer %d, epoch %d, open %s, partitions %v)\n",
		id, d.ProducerID, d.ProducerEpoch, rowOf(d, now).Age, d.Partitions)
	return nil
}

func printTxns(w io.Writer, rows []txnRow, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TRANSACTIONAL ID\tSTATE\tPRODUCER\tEPOCH\tCOORDINATOR\tAGE\tTIMEOUT\tPARTITIONS")
	for _, r := range rows {
		var parts []string
		for _, t := range slices.Sorted(maps.Keys(r.Partitions)) {
			for _, p := range r.Partitions[t] {
				parts = append(parts, fmt.Sprintf("%s/%d", t, p))
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n", r.ID, r.State, r.ProducerID, r.ProducerEpoch, r.Coordinator,
			r.Age, r.Timeout, strings.Join(parts, ","))
	}
	return tw.Flush()
}
