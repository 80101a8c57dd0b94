// Package kafkasource runs checkpointed processing chains over the
// partitions of a Kafka consumer group, with segmentio/kafka-go.
//
// # Tour
//
// Write a BuildChain that builds one partition's chain: it declares each
// part once, in the checkpoint.Chain the Source creates for the partition,
// under the stable name that keys its state in every checkpoint, and
// returns a Processor with the Process function. Participants built
// elsewhere (dedup, a window.Operator, state) are registered with
// Chain.Add; a sink opened on the chain (chsink.Open, windowsink.Open,
// kafkasink.Open) registers itself, taking the chain's partition, the
// Store's Storage and Keep, and, for ClickHouse, one chsink.DB. The
// handles these return are what Process uses. Chains turns the BuildChain
// into the ProcessorFunc that New ties to a consumer group and a
// checkpoint.Coordinator; Run blocks:
//
//	db := chsink.DB{Addr: "clickhouse:9000", Database: "analytics"}
//	src, err := kafkasource.New(
//		kafkasource.Group{Brokers: brokers, ID: "aggregator", Topics: []string{"events"}},
//		coord,
//		kafkasource.Chains(store, func(ctx context.Context, c *checkpoint.Chain) (*kafkasource.Processor, error) {
//			d, err := dedup.New(24*time.Hour, dedup.Options{})
//			if err != nil {
//				return nil, err
//			}
//			if err := c.Add("dedup", d); err != nil {
//				return nil, err
//			}
//			s, err := chsink.Open(ctx, c, db, "events", schema, chsink.Options{})
//			if err != nil {
//				return nil, err // the Source closes what c holds
//			}
//			return &kafkasource.Processor{Process: func(ctx context.Context, m kafka.Message) error { ... }}, nil
//		}),
//		kafkasource.Options{})
//	err = src.Run(ctx)
//
// store is the Coordinator's Store. A ProcessorFunc written by hand, whose
// Processor lists its Participants by name, still works (Chains fills that
// field), but is deprecated: it repeats for every sink the partition, the
// Storage, the Keep and the database that the chain knows, and must return
// its half-built Processor with an error for the Source to close it.
// Moving such a chain to Chains keeps its checkpoints as long as every
// participant keeps its name (a sink's Options.ParticipantName, when its
// name was not its table's).
//
// A chain that gains from deciding records together sets
// Processor.ProcessBatch instead of Process: it gets the records fetched
// and waiting (at most Options.MaxBatch a call), so it can decide them with
// one dedup ObserveBatch and hand its sinks rows in bulk (chsink's
// AddBatch). It returns how many it handled; fewer, with an error, names
// the record that failed, which goes to the poison policy like a Process
// error. examples/processor's chain does both, with the same checkpoints
// and rows either way.
//
// A chain whose output goes back to Kafka writes it through package
// sink/kafkasink, a participant that writes one transaction per checkpoint
// (a two-phase commit: pre-committed at the barrier, committed when the
// checkpoint is durable), so read_committed consumers downstream see each
// output record exactly once. A plain kafka-go Writer in Process would
// write a replay's records again.
//
// # How it works
//
// Run uses kafka-go's ConsumerGroup and Generation API, not a Reader with a
// GroupID (which has no assignment callbacks, cannot seek, keeps buffered
// messages of revoked partitions and commits before processing). For every
// generation, each assigned partition gets a goroutine that builds the
// chain, restores it from the partition's newest checkpoint, and reads the
// partition from the checkpoint's offset with a fetcher of its own.
// Barriers from the coordinator arrive between records (see package
// checkpoint); after a completed checkpoint, once its sinks were told (a
// kafkasink's transaction committed), the chain commits its offset
// with Generation.CommitOffsets, which the broker refuses for a stale
// generation, and only while the generation's context is live. Per-partition
// order is kept: one goroutine processes one partition.
//
// The fetcher sends one Fetch request at a time for its partition, with
// isolation level read_committed, reads the response whole into a fresh
// buffer and decodes its record batches (CRC checked; gzip, snappy, lz4
// and zstd through kafka-go's codecs) in place: a record's Key, Value and
// Headers are windows of that buffer, not copies, so a fetch costs a few
// allocations rather than a dozen a record. It is the SDK's one fetch path
// (kafkatxn.Reader reads through it too): it connects the way
// Options.Dialer says (TLS, SASLMechanism, Resolver, DialFunc), drops the
// records of aborted transactions and transaction control records (see
// Transactional input), and retries broker and connection errors with a
// backoff. A batch older than the v2 format (Kafka before 0.11, not
// converted by the broker) stops the chain with a *FormatError naming the
// partition and offset. A message keeps its whole fetch's buffer (up to
// MaxBytes) alive: copy a small piece you keep for long. A fetch's records
// reach the chain through a mailbox: the fetching goroutine appends them and the chain
// takes all that wait in one swap of two reused slices, so a busy chain
// gets them in batches without a hand-off per record. A checkpoint that a
// participant declines (checkpoint.ErrDeclined) is skipped without stopping
// the chain; any other checkpoint failure stops Run.
//
// Processor.Tick, if set, runs on the chain goroutine every TickInterval,
// between records and also while none arrive (closing windows of an idle
// partition). It is driven by the wall clock, so it is not replayed
// identically after a restore: keep its effects idempotent.
//
// # Lifecycle of participants
//
// The Source owns each chain's participants. One that implements Runner
// (Run(ctx) error, such as a sink's flush timer) is started once the chain
// is restored and awaited when the chain ends; its error fails the chain.
// One that implements io.Closer is closed once when the chain ends, after
// Processor.Close, however the chain ended. A ProcessorFunc that fails
// halfway returns what it built with the error, and the Source closes it.
// Rows a chain emits without a record of their own (a window's Tick) take
// their positions from a sink.Cursor whose state is in the checkpoint:
// windowsink keeps one inside; a chain that feeds a sink from its own
// operator adds one to the chain (Chain.Add) beside that sink.
//
// # Restarts
//
// A chain that fails while its server is unreachable (ClickHouse down, a
// refused or reset connection: IsRetryable) is closed and built again from
// its partition's last checkpoint after an exponential backoff, bounded by
// Restart.MaxBackoff, while the other partitions go on; each restart is
// counted in exactlyonce.kafkasource.chain.restarts. Defaults: 1 s initial backoff,
// doubling, at most 1 min, up to 10 % shorter at random, reset after 5 min without a
// failure, unlimited attempts (see Restart). Any other chain error ends
// Run. Before a chain is built again, the group coordinator must confirm
// that its generation is current (DescribeGroups: the group Stable, this
// member in it): a member paused past its session timeout learns that its
// generation ended only at its next heartbeat, and a chain attached
// meanwhile would restore the new owner's checkpoint and fence the new
// owner's Kafka producer. A checkpoint the store refuses with
// checkpoint.ErrSuperseded (a later generation saved one) is that case
// found by the store: the chain stops as on a revocation once the
// coordinator confirms the generation ended, and restarts if it does not.
// Under ProtocolConsumer the coordinator is not asked (the member's own
// heartbeat ends a chain's context when its partition leaves): a failed
// chain restarts after its backoff, and one stopped by a refused save
// restarts (counted too) at the member's next heartbeat if the partition
// is still assigned to the member.
//
// # Topics and partitions
//
// Run waits, with a Warn log, until every subscribed topic exists
// (Options.MissingTopic: MissingTopicFail returns *TopicNotFoundError
// instead), and checks every Options.TopicPollInterval for new partitions:
// a topic that grows ends the generation, and the next one gives the new
// partitions their chains. A group subscribed with Group.TopicRegex
// (ProtocolConsumer only) waits for no topic: the group coordinator
// matches the regex against the cluster's topics and assigns those that
// match, a topic created later included, and the checks below count the
// topics the regex matches.
//
// Two deployment mistakes are reported, once a generation, at Warn and in a
// metric, though neither stops Run. A group with more members than its
// topics have partitions leaves members idle: they read nothing and look
// healthy (exactlyonce.kafkasource.group.idle_members; add partitions or
// run fewer instances). A topic whose partition count changes under a
// running Source, or between two of its Runs, changes the producers'
// key->partition routing: a key's new records land in another partition
// than its old ones, so state kept per partition (a chain's dedup keys and
// windows) sees the key's records apart, a duplicate across the move is
// not dropped (exactlyonce.kafkasource.topic.partition_changes). Create
// topics with the partitions they will need.
//
// Run rides out routine consumer-group errors (a rebalance in progress, a
// stale generation or member, a moved coordinator, a broken connection):
// it rejoins by itself; after 20 such errors in a row, Run returns
// the last one.
//
// # Rebalances and fencing
//
// Under the classic protocol (Kafka 3.x, or ProtocolClassic) every
// rebalance ends the generation, and with it the context passed to
// ProcessorFunc and Process; under the consumer protocol only the chains
// of partitions that move end ("The consumer group protocol" below). The chain stops where it is and abandons the
// work since its last checkpoint: nothing past a checkpoint is committed,
// and the partition's next owner restores that checkpoint and replays. A
// sink should fence on that context (stop writing once it ends), and be
// idempotent for the replay.
// A chain's participants serve its partition only, so a window operator in
// a chain never spans partitions: a revoked partition takes its operator and
// watermark with it, and no other chain's watermark waits for it (nothing
// to call window.Operator.RemoveInput for).
//
// # The consumer group protocol
//
// The rebalances above are the classic protocol's (ProtocolClassic):
// eager, so a member joining or leaving stops every chain of every
// instance. Kafka's consumer group protocol (ProtocolConsumer; KIP-848,
// Kafka 4.0 and later) stops only what moves: the coordinator computes
// each member's target assignment, the member heartbeats at the interval
// the coordinator gives (the broker's group.consumer.heartbeat.interval.ms;
// its session timeout is the broker's group.consumer.session.timeout.ms),
// and reconciles:
//
//   - a partition that stays keeps its chain, untouched;
//   - a partition that leaves has its chain stopped (where it is, as above,
//     its pending checkpoint settled), and only then is it left out of the
//     partitions the member reports owning, which is what frees it for its
//     next owner;
//   - a partition that arrives gets a chain that restores its checkpoint.
//
// The default, Group.Protocol = ProtocolAuto, decides when Run joins: the
// consumer protocol where the coordinator takes a member of it, the
// classic one on Kafka 3.x, on brokers without "consumer" in
// group.coordinator.rebalance.protocols, and in a classic group the
// coordinator will not convert (below). Mind what changes with the
// protocol: the session timeout becomes the broker's (45 s by default, so
// a killed instance's partitions wait that long for their next owner;
// Kafka 4.0 and later let it be set per group, as the group config
// consumer.session.timeout.ms), and Options.SessionTimeout only bounds how
// long a member that hears nothing from the coordinator keeps its chains.
//
// A member the coordinator fences (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID)
// stops every chain and joins again with epoch 0; one that hears nothing
// from the coordinator for Options.SessionTimeout (at least three
// heartbeat intervals) stops them too. Run stops every chain before it
// leaves the group (epoch -1). Offsets are committed with OffsetCommit v9
// and the member's epoch; checkpoints carry the epoch in which the
// partition arrived as their Generation (a later owner arrives in a higher
// one); MembershipOf gives a chain the member id and current epoch, for
// offsets committed in a transaction. Options.HeartbeatInterval is then only the retry delay after a
// failed heartbeat; SessionTimeout and RebalanceTimeout keep their
// meaning. The idle-member and partition-count checks run whenever the
// member's epoch moves on (the group's assignment changed), counting the
// members once the group is Stable (ConsumerGroupDescribe v0).
//
// Two features exist under this protocol only. A Group.TopicRegex is sent
// to the coordinator (SubscribedTopicRegex, Kafka 4.0 and later), which
// evaluates it and assigns a matching topic's partitions once the topic
// exists. A Group.InstanceID makes the Source a static member: Run leaves
// with epoch -2 instead of -1, and the coordinator keeps the member's
// partitions, unread, until its session timeout, so a restart with the
// same InstanceID (a rolling deploy, a pod rescheduled) gets them back
// with no rebalance: no other member's chain stops or starts. A second
// Source with an InstanceID that a member holds is refused: Run retries
// for up to 90 seconds (a crashed predecessor's session expires meanwhile)
// and then returns ErrUnreleasedInstanceID; a member whose InstanceID
// another one took stops with ErrFencedInstanceID. A static member that
// rejoins after a fence or unanswered heartbeats leaves in its own name
// first (epoch -2), since the coordinator refuses the join of an instance
// id it still holds. kafka-go's classic group API sends neither, so New
// refuses both under ProtocolClassic.
//
// A group moves between the protocols online, in a rolling restart: the
// coordinator (Kafka 4.x with group.consumer.migration.policy
// "bidirectional", its default) converts a classic group when the first
// consumer-protocol member joins, keeps the classic members in it until
// they are replaced, and converts it back when the last consumer-protocol
// member leaves a group of classic members. The group's committed offsets
// and the checkpoints carry every partition over, both ways, and a
// partition is still never processed by two chains at once. The
// conversion parses each classic member's embedded consumer protocol
// (ConsumerProtocolSubscription): kafka-go's ConsumerGroup writes one that
// says version 1 but ends before that version's owned partitions, so the
// Source's classic connections send it as what it is, version 0. Members
// of releases before that are refused: a consumer-protocol member joining
// a group with one gets GROUP_ID_NOT_FOUND, a classic member of such a
// release joining a consumer group INCONSISTENT_GROUP_PROTOCOL; Run
// returns the error (wrapping kafka.GroupIdNotFound or
// kafka.InconsistentGroupProtocol) and the running instances keep the
// group. ProtocolAuto joins as a classic member instead in the first case,
// so a rolling upgrade from such a release passes, and the next rolling
// restart moves the group to the consumer protocol.
//
// # Offsets out of range
//
// Before reading, a chain checks the restored offset against the log's
// first offset and high watermark. Options.OutOfRange decides what happens
// when it is outside: fail (default; Run returns *OffsetOutOfRangeError),
// or continue at the earliest or latest offset, keeping the restored state.
// The fetcher reports a broker's OFFSET_OUT_OF_RANGE, so a chain that
// finds its offset gone learns it instead of moving silently; the chain
// applies the policy again.
//
// # Poison records
//
// A record Process can never handle (a value it cannot decode) would stop
// the chain at the same offset on every restart. Process says so by
// returning Poison(err) (an error wrapping ErrPoison); the Processor's
// policy decides. Without Processor.DeadLetter (the default) the chain
// stops and Run returns a *PoisonError with the partition and offset: the
// partition goes no further until someone deals with the record. With a
// DeadLetter topic the record is written there, with its key, value, time
// and headers plus its origin (HeaderDeadLetterTopic, ...Partition,
// ...Offset, ...Error; ParseDeadLetter reads them back), and the chain goes
// on with the next record. Either way exactlyonce.kafkasource.poison_records counts it;
// nothing is skipped silently. A faster decoder than encoding/json must
// refuse what it refuses, or poison turns into wrong rows:
// docs/json-events.md has the recipe and the figures.
//
// The dead-letter write is made idempotent by looking before writing: a
// chain killed after the write but before its checkpoint replays the
// record. The chain's checkpointed state (participant
// "kafkasource.deadletter") holds the dead-letter offset from which any
// record it may replay would be found; the first poison record after a
// restore reads the dead-letter partition from there to its end, and a
// replayed poison record already there is not written again. A partition
// that has never completed a checkpoint reads its dead-letter partition
// from the start once. Source partition P always writes to dead-letter
// partition P modulo the topic's partition count.
//
// Looking is not enough when two processes own a partition at once (an
// owner paused past its session timeout goes on until it notices): both
// could look, find nothing and write. So each dead letter is written in a
// Kafka transaction of its own, under the transactional id
// DeadLetter.TransactionalIDPrefix + "-" + topic + "-" + partition, and
// the writer starts its producer before it looks. The start fences every
// earlier writer of the id: what they committed is there to be found, what
// they had not committed is aborted, and they can commit nothing more.
// Read the dead-letter topic with isolation level read_committed
// (kafkatxn.Reader does): a read_uncommitted reader also sees the aborted
// writes of fenced owners.
//
// # Brokers
//
// Apache Kafka 3.x and 4.x: every request is at or above the lowest
// version Kafka 4.0 kept (KIP-896). The tests run on Apache Kafka 4.4.0
// (make test) and 3.9.2 (make test-compat), TLS and SASL (PLAIN,
// SCRAM-SHA-256, SCRAM-SHA-512) among them. Kafka 4.0.0 refused JoinGroup
// v0 and v1 (kafka-go issues 1360 and 1378); the classic group asks for v2
// where the broker has it, and 4.0.1 and later accept the older versions
// again. docs/design/kafka-protocol.md lists the version of every request.
//
// A session timeout outside the broker's group.min.session.timeout.ms (6 s
// by default) and group.max.session.timeout.ms (30 min) is refused when
// the group is joined: Run returns a *SessionTimeoutError with the
// broker's bounds.
//
// # Transactional input
//
// A chain reads read_committed: nothing past the last stable offset (an
// open transaction holds the partition back until it ends), no record of
// an aborted transaction and no transaction control record, whoever wrote
// them (Kafka Streams, Flink, kafkatxn, kafkasink). The fetcher uses the
// fetch response's aborted transactions and the control batches, as the
// Java consumer does. (kafka-go's Reader with ReadCommitted hands out both
// aborted and control records, and its Message does not say which is
// which.) Offsets processed have gaps where those were dropped.
//
// # Errors
//
// Match them with errors.Is (the sentinels) or errors.As (the types):
//
//   - [ErrRunning] is returned by Run on a Source that is already running.
//   - [ErrInvalidOptions] is wrapped by the error New returns for a missing
//     argument or an invalid option.
//   - [ErrNoConsumerProtocol] is wrapped by the error Run returns under
//     ProtocolConsumer when the group coordinator does not offer the
//     consumer group protocol.
//   - [ErrUnreleasedInstanceID] is wrapped by the error Run returns when
//     the Group.InstanceID stays held by another member of the group;
//     [ErrFencedInstanceID] when another member joined with it.
//   - [ErrPoison] marks a record that Process can never handle, such as a
//     value it cannot decode: processing it again fails the same way, so
//     retrying would stall the partition forever.
//   - [ErrRestartsExhausted] is wrapped by the error Run returns when a
//     partition's chain failed Restart.MaxAttempts times in a row with
//     retryable errors.
//   - [ErrTopicNotFound] is matched by *TopicNotFoundError.
//   - [FormatError] is the error (wrapped) a chain stops with when its
//     partition holds a record batch older than the v2 format (Kafka before
//     0.11, not converted by the broker): it names the partition and the
//     batch's offset.
//   - [OffsetOutOfRangeError] reports that a partition's restored offset is
//     no longer (or not yet) in the log, and the OutOfRange policy is
//     OutOfRangeFail.
//   - [PoisonError] is the error Run returns when a chain without a
//     dead-letter topic meets a poison record: the chain stops at that
//     offset rather than skip it.
//   - [SessionTimeoutError] is returned by Run when the broker refuses
//     Options.SessionTimeout (INVALID_SESSION_TIMEOUT): it lies outside the
//     broker's group.min.session.timeout.ms and
//     group.max.session.timeout.ms.
//   - [TopicNotFoundError] is returned by Run when a subscribed topic does
//     not exist and Options.MissingTopic is MissingTopicFail.
//
// # Guarantees
//
//   - Every record is processed at least once, and its effect on
//     checkpointed state exactly once, across crashes and rebalances.
//   - A checkpoint's offset and its participants' state agree record for
//     record: barriers are taken between two records or two ProcessBatch
//     calls, never inside one, so a barrier that arrives while a fetched
//     batch is processed splits it there.
//   - The records a chain gets are its partition's committed records
//     (aborted transactions and control records dropped), in offset
//     order, none skipped: a batch whose CRC does not match or that cannot
//     be decoded fails the fetch instead, and a batch older than v2 stops
//     the chain with a *FormatError. Keys, values and header values are
//     nil when null and empty slices when empty; a record's Time is the
//     broker's append time on a LogAppendTime topic.
//   - Once every record fetched is processed, the chain's offset moves
//     past the control and aborted records that followed the last one, as
//     the Java consumer's position does: a transactional topic read to its
//     end is checkpointed and committed at its high watermark (lag 0).
//   - Offsets committed to the group never pass a completed checkpoint; the
//     checkpoint, not the group offset, is where a chain restarts.
//   - Under ProtocolConsumer a partition is given up (left out of the
//     member's heartbeat, or the member leaves, statically or not) only
//     after its chain stopped, so no two members run a chain of it at once
//     while their heartbeats are answered. A static member's partitions
//     are read by no one from its leave until it is back or its session
//     timeout ends.
//   - A chain's Process (or ProcessBatch), Tick and its participants are
//     called from one goroutine, records in offset order; once the chain's ownership has
//     ended it takes no further record, tick or barrier (one already taken
//     runs with the ended context, which a sink fences on).
//   - Run returns a chain's permanent error (failed checkpoint, Process
//     error, restore error, offset out of range, a poison record without
//     dead-letter topic) after stopping every
//     chain; a retryable one restarts that chain alone from its last
//     checkpoint, so a restart replays and never skips. Run returns nil
//     when its context ends.
//   - A chain is built again only after the group coordinator confirmed
//     its generation is current; a save refused
//     with checkpoint.ErrSuperseded ends neither Run nor any other chain:
//     the chain stops if its generation ended, and is restarted from its
//     last checkpoint if not.
//   - No participant goroutine outlives its chain: Runners are awaited and
//     Closers closed before the chain's partition is given up.
//   - A poison record of a chain with a dead-letter topic is in that topic
//     exactly once, as a read_committed consumer reads it, across crashes,
//     replays and owners running at once (a revoked owner that has not
//     noticed yet), before the chain's checkpoint passes it. Assumed: the
//     dead-letter topic is not truncated below the checkpointed offset,
//     and no other process uses the chain's dead-letter transactional ids.
package kafkasource
