package kafkatxn

import (
	"context"
	"errors"
	"net"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/internal/kafkawire"
)

// batch is the header of one record batch of a fetch response.
type batch struct {
	baseOffset, lastOffset int64
	producerID             int64
	producerEpoch          int16
	baseSequence           int32
	control                bool
	commit                 bool // of a control batch: commit (true) or abort marker
}

type fetchResult struct {
	err           error // the partition's error code
	highWatermark int64
	batches       []batch
}

// fetch sends one Fetch request for one partition, on a connection of its
// own made the way rt says (a *kafka.Transport's TLS, SASL, Dial and
// Resolver), and returns the headers of the batches from offset on. The
// producer uses it to find its own batches and transaction markers, so it
// reads uncommitted unless committed is set. The batches are decoded by
// internal/kafkawire, the module's one record-batch decoder.
func fetch(ctx context.Context, rt kafka.RoundTripper, addr net.Addr, topic string, partition int, offset int64,
	committed bool, maxBytes int, maxWait time.Duration) (*fetchResult, error) {
	tr, _ := rt.(*kafka.Transport)
	f := kafkawire.Fetcher{Dialer: kafkawire.TransportDialer(tr), Brokers: strings.Split(addr.String(), ","), Topic: topic,
		Partition: partition, Next: offset, MaxBytes: maxBytes, MaxWait: maxWait, Uncommitted: !committed}
	defer f.Close()
	bs, hwm, err := f.FetchBatches(ctx)
	var kerr kafka.Error
	if errors.As(err, &kerr) {
		return &fetchResult{err: err}, nil
	}
	if err != nil {
		return nil, err
	}
	fr := &fetchResult{highWatermark: hwm}
	for _, b := range bs {
		fr.batches = append(fr.batches, batch{baseOffset: b.BaseOffset, lastOffset: b.LastOffset, producerID: b.ProducerID,
			producerEpoch: b.ProducerEpoch, baseSequence: b.BaseSequence, control: b.Control, commit: b.Commit})
	}
	return fr, nil
}
