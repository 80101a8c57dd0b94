package kafkapub_test

import (
	"errors"
	"fmt"

	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/idempotency/kafkapub"
)

// What New warns about at start-up, for three topic configurations.
func ExampleDurability() {
	for _, d := range []kafkapub.Durability{
		{Topic: "webhooks", MinInSyncReplicas: 2, ReplicationFactor: 3},
		{Topic: "webhooks", MinInSyncReplicas: 1, ReplicationFactor: 3},
		{Topic: "webhooks", MinInSyncReplicas: 1, ReplicationFactor: 1},
	} {
		fmt.Printf("rf=%d min.insync=%d weak=%v reason=%q\n", d.ReplicationFactor, d.MinInSyncReplicas, d.Weak(), d.Reason())
	}
	// Output:
	// rf=3 min.insync=2 weak=false reason=""
	// rf=3 min.insync=1 weak=true reason="min.insync.replicas is 1, so the leader alone may acknowledge a write (acks=1 in disguise); set it to 2 or more"
	// rf=1 min.insync=1 weak=true reason="the topic has a single replica, so one broker's disk holds every acknowledged event"
}

// A consumer reads the provider's metadata from a record's headers instead
// of looking them up by hand.
func ExampleReadMetadata() {
	msg := kafka.Message{Headers: kafkapub.Headers(idempotency.Delivery{
		Key: "a7f1bb43-0001", Source: "jira", Event: "jira:issue_updated", Retry: 2,
	})}
	md, err := kafkapub.ReadMetadata(msg)
	fmt.Printf("%+v %v\n", md, err)
	_, err = kafkapub.ReadMetadata(kafka.Message{})
	fmt.Println(errors.Is(err, kafkapub.ErrNoMetadata))
	// Output:
	// {EventID:a7f1bb43-0001 Source:jira EventType:jira:issue_updated HookID: Retry:2} <nil>
	// true
}
