package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/harness/internal/chaos/history"
	"github.com/exactlyonce/exactlyonce/internal/kafkawire"
)

// dumpPartitions writes, for every Kafka partition a history finding names,
// the log as the broker holds it: each batch's offsets, producer id and
// epoch, whether it is transactional, whether a control batch commits or
// aborts, and the keys of a data batch's records (read uncommitted). It
// tells a broker that never wrote an abort marker after an aborted
// transaction's records from a reader that did not apply one, which the
// history alone cannot. It returns the files written.
func dumpPartitions(ctx context.Context, brokers []string, findings []history.Finding, dir string) ([]string, error) {
	type part struct {
		topic     string
		partition int
	}
	var parts []part
	for _, f := range findings {
		topic, ok := strings.CutPrefix(f.Table, "kafka.")
		if p := (part{topic, f.Partition}); ok && !slices.Contains(parts, p) {
			parts = append(parts, p)
		}
	}
	var files []string
	var errs []error
	for _, p := range parts {
		path := filepath.Join(dir, fmt.Sprintf("kafka-%s-%d.log", p.topic, p.partition))
		if err := dumpPartition(ctx, brokers, p.topic, p.partition, path); err != nil {
			errs = append(errs, fmt.Errorf("%s/%d: %w", p.topic, p.partition, err))
			continue
		}
		files = append(files, path)
	}
	return files, errors.Join(errs...)
}

// dumpPartition writes one partition's batches to path, a line each.
func dumpPartition(ctx context.Context, brokers []string, topic string, partition int, path string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	keys, err := keysByOffset(ctx, brokers, topic, partition)
	if err != nil {
		return err
	}
	f := &kafkawire.Fetcher{Dialer: &kafka.Dialer{Timeout: 10 * time.Second}, Brokers: brokers, Topic: topic, Partition: partition,
		MaxBytes: 1 << 20, MaxWait: 100 * time.Millisecond, Uncommitted: true}
	defer f.Close()
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(out)
	fmt.Fprintf(w, "# %s/%d as the broker holds it (read uncommitted): offsets, producer id/epoch, kind\n", topic, partition)
	for {
		bs, hwm, err := f.FetchBatches(ctx)
		if err != nil {
			return errors.Join(err, out.Close())
		}
		for _, b := range bs {
			kind := "data"
			switch {
			case b.Control && b.Commit:
				kind = "COMMIT marker"
			case b.Control:
				kind = "ABORT marker"
			case b.Transactional:
				kind = "transactional data"
			}
			fmt.Fprintf(w, "%d-%d\tpid %d epoch %d seq %d\t%s", b.BaseOffset, b.LastOffset, b.ProducerID, b.ProducerEpoch, b.BaseSequence, kind)
			if !b.Control {
				var ks []string
				for o := b.BaseOffset; o <= b.LastOffset; o++ {
					ks = append(ks, keys[o])
				}
				fmt.Fprintf(w, "\t%s", strings.Join(ks, " "))
			}
			fmt.Fprintln(w)
			f.Next = b.LastOffset + 1
		}
		if f.Next >= hwm {
			fmt.Fprintf(w, "# high watermark %d\n", hwm)
			break
		}
	}
	return errors.Join(w.Flush(), out.Close())
}

// keysByOffset reads a partition uncommitted and returns each record's key
// by offset.
func keysByOffset(ctx context.Context, brokers []string, topic string, partition int) (map[int64]string, error) {
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: partition,
		IsolationLevel: kafka.ReadUncommitted, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	conn, err := kafka.DialLeader(ctx, "tcp", brokers[0], topic, partition)
	if err != nil {
		return nil, err
	}
	end, err := conn.ReadLastOffset()
	_ = conn.Close()
	if err != nil {
		return nil, err
	}
	keys := map[int64]string{}
	for end > 0 {
		// Control records are not read: after the last data record the
		// read waits, and its timeout ends the dump.
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		m, err := r.ReadMessage(rctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			break
		}
		if err != nil {
			return keys, err
		}
		keys[m.Offset] = string(m.Key)
		if m.Offset+1 >= end {
			break
		}
	}
	return keys, nil
}
