package main

import (
	"context"
	"fmt"
	"io"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// runVerify checks every checkpoint and sink journal of a topic reads back
// intact, and says which checkpoint a restart restores.
func runVerify(ctx context.Context, args []string, env func(string) string, stdout io.Writer) error {
	fs := newFlags("verify")
	var sf storageFlags
	var pf partitionFlags
	sf.register(fs, env)
	pf.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	st, err := sf.open(env)
	if err != nil {
		return err
	}
	ps, err := pf.list(ctx, st, sf.ckptPrefix)
	if err != nil {
		return err
	}
	problems := 0
	for _, part := range ps {
		tp := checkpoint.TopicPartition{Topic: pf.topic, Partition: part}
		fl, err := files(ctx, st, sf.ckptPrefix, pf.topic, part)
		if err != nil {
			return err
		}
		restored, err := restoredID(ctx, st, sf.ckptPrefix, tp)
		if err != nil {
			return err
		}
		intact := 0
		var next *checkpoint.Checkpoint // what a restart restores
		for _, f := range fl {
			e, cp := read(ctx, st, sf.ckptPrefix, tp, f)
			if e.Error == "" {
				for name, s := range cp.States {
					if si := decodeState(ctx, name, s, func(ctx context.Context, participant, name string) ([]byte, error) {
						return st.Get(ctx, fmt.Sprintf("%s/%s/%d/objects/%s/%s", sf.ckptPrefix, tp.Topic, tp.Partition, participant, name))
					}); si.Error != "" {
						e.Error = fmt.Sprintf("state %s: %s", name, si.Error)
					}
				}
			}
			if e.Error != "" {
				problems++
				fmt.Fprintf(stdout, "%s: checkpoint %d (generation %d, %s) DAMAGED: %s\n", tp, e.ID, e.Generation, e.Name, e.Error)
				continue
			}
			intact++
			e.mark(restored)
			switch {
			case e.Superseded:
				fmt.Fprintf(stdout, "%s: checkpoint %d (generation %d) is superseded: a revoked owner saved it after a later owner's checkpoint; a restart skips it\n", tp, e.ID, e.Generation)
			case e.Restored:
				next = cp
			}
		}
		js, err := readJournals(ctx, st, tp.Topic, tp.Partition)
		if err != nil {
			return err
		}
		for _, j := range js {
			for _, p := range j.Problems {
				problems++
				fmt.Fprintf(stdout, "%s: sink journal %s: %s\n", tp, j.Name, p)
			}
		}
		switch {
		case intact == 0:
			problems++
			fmt.Fprintf(stdout, "%s: NO INTACT CHECKPOINT of %d: a restart would start from the start policy\n", tp, len(fl))
		case next == nil:
			// The store skipped every checkpoint this command read intact: a
			// state it could not decode is damage the store does not see.
			problems++
			fmt.Fprintf(stdout, "%s: a restart restores checkpoint %d, which is damaged\n", tp, restored)
		default:
			fmt.Fprintf(stdout, "%s: %d of %d checkpoints intact, a restart restores %d at offset %d; %d sink journals\n", tp, intact, len(fl), next.ID, next.NextOffset, len(js))
		}
	}
	if problems > 0 {
		fmt.Fprintf(stdout, "%d problems\n", problems)
		return errFound
	}
	fmt.Fprintln(stdout, "every checkpoint and sink journal is intact")
	return nil
}
