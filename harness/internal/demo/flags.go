package demo

import "flag"

// RegisterFlags defines the demo's flags on fs, with their defaults, into c.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.Events, "events", 4000, "webhooks the providers send")
	fs.IntVar(&c.Orgs, "orgs", 12, "organisations (the partitioning key)")
	fs.IntVar(&c.Partitions, "partitions", 4, "partitions of the Kafka topic")
	fs.IntVar(&c.Instances, "instances", 1, "processor instances in one consumer group (more than 1 on kfake needs -kill-kafka=false)")
	fs.IntVar(&c.Kills, "kills", 3, "times the stream processor is killed with SIGKILL")
	fs.BoolVar(&c.KillClickHouse, "kill-clickhouse", true, "kill the embedded ClickHouse with SIGKILL once and restart it")
	fs.StringVar(&c.Kafka, "kafka", KafkaFake, "the embedded broker, unless KAFKA_BROKERS names yours: kfake (quick; loses acknowledgements at the wire), apache (Apache Kafka 4.4), apache-3.9 or cluster (three Apache Kafka brokers and a controller)")
	fs.BoolVar(&c.KillKafka, "kill-kafka", true, "kill the embedded Kafka broker with SIGKILL once and restart it")
	fs.BoolVar(&c.Faults, "faults", true, "inject Kafka publish failures at the gateway, duplicate deliveries and a gateway restart")
	fs.StringVar(&c.Store, "store", "memory", "where the gateway keeps idempotency keys: memory or redis")
	fs.Uint64Var(&c.Seed, "seed", 1, "seed of the generated events and faults")
	fs.StringVar(&c.Dir, "dir", "", "state directory (default: a new temporary directory)")
	fs.StringVar(&c.LogDir, "logs", "", "keep each binary's log (level info, one file per process) in this directory (default: none; the terminal shows errors)")
	fs.BoolVar(&c.Verbose, "v", false, "the binaries log warnings, not only errors")
	fs.StringVar(&c.Naive, "naive", "", "run joints the naive way beside the correct pipeline and print both figures: gateway, sink, merge, mv or avg, a comma-separated list, or all")
	fs.StringVar(&c.Checkpoints, "checkpoints", "fs", "where processors keep checkpoints and sink journals: fs (a local directory) or s3 ($S3_ENDPOINT or an embedded versitygw)")
}
