// Command kfakeserver runs a one-broker franz-go kfake cluster as its own
// process, so a test can kill Kafka with SIGKILL or keep it alive while it
// kills the processes that use it, and inject wire-level faults into it
// while it runs (package kafkafault).
//
// It is built and started by package embedded (StartKafkaProcess); it is not
// meant to be run by hand. Usage:
//
//	kfakeserver -port PORT [-data-dir DIR] [-sync] [-min-session-timeout D] [-control ADDR] [-expire-members]
//
// It prints "control http://ADDR" (the fault endpoint, kafkafault.Handler;
// -control "" turns it off), then "ready" once the broker listens.
// -expire-members expires consumer-group members that stay silent for their
// session timeout, which kfake alone misses for a member that died while
// joining (see kafkafault.ExpireMembers). SIGTERM
// or SIGINT close the cluster cleanly (persisting its state when -data-dir
// is set).
package main
