package kafkapub_test

import (
	"fmt"

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
