// Package kafkafault injects wire-level faults into a franz-go kfake broker
// while it runs: single produce, fetch, offset-commit and consumer-group
// requests failed with retriable errors, a produce whose acknowledgement is
// lost after the broker wrote it, dropped connections and slow answers. It
// is how the tests and the chaos run make the embedded Kafka misbehave the
// way a real cluster does, with real clients on the other side.
//
// A tour:
//
//	inj := kafkafault.New()
//	c, err := kfake.NewCluster(kfake.ListenFn(inj.Listen)) // every connection passes through inj
//	inj.Attach(c)
//	inj.Inject(kafkafault.Fault{Kind: kafkafault.ProduceLostAck})    // the next produce is written, its answer lost
//	inj.Inject(kafkafault.Fault{Kind: kafkafault.FetchError, Count: 3})
//	inj.Inject(kafkafault.Fault{Kind: kafkafault.Slow, Delay: time.Second, Duration: 5 * time.Second})
//	inj.Stats()                                                    // what was injected, and what it hit
//
// ExpireMembers corrects one way kfake differs from Kafka: a consumer-group
// member that dies while its JoinGroup waits for the rebalance stays in the
// group for good (expire.go explains why); it expires such a member after
// its session timeout, as Kafka does.
//
// A broker in another process (internal/embedded's kfakeserver) serves
// Handler on a small HTTP endpoint; Client drives it from the parent with the
// same three calls.
//
// Two mechanisms do the work. Errors answered in place of a request's result
// are kfake's own faults (Cluster.Fault), which fail the request before the
// broker acts on it, or, for ProduceTimeout, after it wrote the records, as a
// real broker does when replication times out. What a broker's answer cannot
// express is done on the connection: Listen wraps every accepted connection,
// reads the request headers that go by to know which answer belongs to which
// request (by correlation id), and closes the connection in place of a
// produce's answer (the lost acknowledgement), closes every connection
// (DropConnections), or holds answers back (Slow).
//
// # Guarantees
//
// A fault hits exactly the number of requests it was injected for (Count),
// no more, and Stats counts every hit. A ProduceLostAck hit means the broker
// appended the batch and the client got no answer: the connection is closed
// after the broker's answer was ready and before a byte of it was sent.
// Faults that return an error refuse the request before the broker acts on
// it (nothing written, nothing committed, the group unchanged), except
// ProduceTimeout, which answers REQUEST_TIMED_OUT after the write. Faults
// live in the broker's memory: a restarted broker starts with none.
//
// The connection layer assumes kfake writes each answer with one Write call
// (it does: it encodes the whole frame and writes it at once); the tests of
// this package would fail if that changed. ExpireMembers makes a member
// leave only after it sent no JoinGroup, SyncGroup, Heartbeat or
// OffsetCommit for longer than the session timeout of its JoinGroup, and
// only in a group that is stable or completing a rebalance: a member that
// heartbeats is never expired.
package kafkafault
