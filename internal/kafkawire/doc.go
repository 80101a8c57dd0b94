// Package kafkawire is the SDK's one reader of Kafka's fetch path: it
// connects to a partition's leader the way a kafka-go Dialer says (its
// Resolver, DialFunc, TLS and SASL mechanism), sends Fetch requests with
// isolation level read_committed (read_uncommitted for the batch headers
// kafkatxn looks up past the last stable offset), and decodes the record
// batches of the responses into kafka.Messages, dropping transaction
// control records and the records of aborted transactions as the Java
// consumer does.
//
// Both kafkasource (the chains' fetchers) and kafkatxn.Reader read through
// it, so there is one record-batch decoder in the module.
//
// # Requests
//
// A Fetcher finds the leader with kafka-go's Dialer.LookupLeader (Metadata
// v6 over kafka-go's Conn) and then sends, on its own connection:
// SaslHandshake v1 and SaslAuthenticate v0 when the Dialer has a
// SASLMechanism (what kafka-go's Dialer sends), and Fetch v4, the lowest
// version Kafka 4.0 kept (KIP-896) and the first with isolation level, last
// stable offset and aborted transactions. For kafkatxn's transaction
// tools it also writes the two admin requests kafka-go lacks,
// ListTransactions v0 and DescribeTransactions v0 (flexible versions:
// request header v2, compact strings and arrays, tagged fields skipped).
//
// # Decoding
//
// A response is read whole into a fresh buffer; a record's Key, Value and
// Headers are windows of it (a compressed batch's, of its decompressed
// copy), never reused, so a caller may keep them. Batches are v2 (magic 2,
// Kafka 0.11 and later), CRC-32C checked, uncompressed or compressed with
// any codec kafka-go has (gzip, snappy, lz4, zstd). A batch in an older
// format (v0 or v1 message sets) is refused with a *FormatError naming the
// partition and offset: Kafka 4.x brokers always answer Fetch v4 in v2, and
// 3.x converts to v2 for Fetch v4.
//
// # Group requests
//
// GroupConn speaks to a group's coordinator for a member of Kafka's
// consumer group protocol (KIP-848), in messages kafka-go lacks, written
// in flexible versions by hand: ConsumerGroupHeartbeat v0 and v1,
// OffsetCommit v9 (member id and epoch), Metadata v12 (topic ids, which
// the assignments name) and ConsumerGroupDescribe v0. It finds the coordinator with FindCoordinator v2
// and checks the versions with ApiVersions, both over kafka-go's protocol
// package.
//
// For the classic protocol, which kafkasource runs on kafka-go's
// ConsumerGroup, ClassicGroupDialer wraps the group's connections so that
// its JoinGroup requests carry a subscription Kafka can parse (kafka-go
// labels its version-0 ConsumerProtocolSubscription version 1), which
// Kafka needs to move a group between the protocols online.
//
// # Transactions v2
//
// For kafkatxn's transactions v2 (KIP-890 part 2) it writes the requests
// kafka-go lacks, in their flexible versions: ApiVersions v3 (the
// finalized transaction.version feature, a tagged field), EndTxn v5 (the
// bumped producer id and epoch in the answer), Produce v12 (a
// transactional Produce that adds its partition to the transaction) and
// TxnOffsetCommit v5 (which adds its group). Each is a protocol.Message
// that implements protocol.RawExchanger and the routing interface of its
// destination (TransactionalMessage, BrokerMessage, GroupMessage), so
// kafka-go's Transport routes it and lends it a pooled connection, on
// which it writes its own bytes and reads its own answer; kafka-go's table
// of request types is left alone.
//
// # Guarantees
//
//   - The messages of a fetch are the partition's committed records from
//     the fetch offset on, in offset order, none skipped: records of
//     aborted transactions (those the broker lists in the response's
//     aborted transactions) and control records are dropped, everything
//     else is handed out.
//   - A message reads as the Java consumer's record: a null key, value or
//     header value is nil, an empty one a non-nil empty slice; its Time is
//     the record's CreateTime, or for a batch whose timestamp type is
//     LogAppendTime the broker's append time (the batch's max timestamp).
//   - A Fetch that ends with its context returns an error wrapping the
//     context's error.
//   - A response or batch that cannot be decoded (a bad length, CRC or
//     record) is an error wrapping ErrMalformed, never partial records of
//     that batch; Next does not move past it.
//   - Next moves past every complete batch looked at, handed out or
//     dropped, and never past a batch cut at the response's end: the next
//     fetch starts there.
//   - A Fetcher holds at most one connection, closed by Close and on any
//     error; it starts no goroutine. So does a GroupConn.
//   - A group response that cannot be decoded is an error wrapping
//     ErrMalformed, never a partial answer.
package kafkawire
