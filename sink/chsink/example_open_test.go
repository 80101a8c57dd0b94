package chsink_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// A sink that is part of a chain: Open takes the server and database once
// (a DB), and the partition, the journal's Storage and the Store's Keep
// from the chain, and registers the sink under the table's name. A
// kafkasource Source builds the chain (kafkasource.Chains); here a
// Coordinator attaches it by hand.
func ExampleOpen() {
	ctx := context.Background()
	srv, err := testkit.StandaloneClickHouse(ctx) // your ClickHouse in production
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	conn, err := ch.Dial(ctx, ch.Options{Address: srv.Addr()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	if err := conn.Do(ctx, ch.Query{Body: deploymentsDDL}); err != nil {
		fmt.Println(err)
		return
	}

	store, _ := checkpoint.NewStore(checkpoint.NewMemoryStorage(), checkpoint.StoreOptions{})
	coord, _ := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: -1})
	defer coord.Close()
	c, _ := checkpoint.NewChain(store, checkpoint.TopicPartition{Topic: "deploys", Partition: 0})
	db := chsink.DB{Addr: srv.Addr(), Database: "default"}
	s, err := chsink.Open(ctx, c, db, "deployments", deploymentSchema, chsink.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	_, err = chsink.Open(ctx, c, db, "deployments", deploymentSchema, chsink.Options{})
	fmt.Println("a second sink of the table:", err)

	task, err := coord.Attach(ctx, c.Partition(), c.Participants())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer task.Detach()
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for i, svc := range []string{"api", "web"} {
		if err := s.Add(ctx, sink.Position{Offset: int64(i)}, Deployment{Org: "acme", Service: svc, At: at}); err != nil {
			fmt.Println(err)
			return
		}
	}
	if err := task.Checkpoint(ctx, nil, 2, checkpoint.Meta{}, nil); err != nil {
		fmt.Println(err)
		return
	}
	var n proto.ColUInt64
	if err := conn.Do(ctx, ch.Query{Body: "SELECT count() AS n FROM deployments", Result: proto.Results{{Name: "n", Data: &n}}}); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("rows:", n.Row(0), "participants:", len(c.Participants()))
	// Output:
	// a second sink of the table: checkpoint: invalid options: Chain.Add("deployments"): the name is taken by a *chsink.Sink[github.com/exactlyonce/exactlyonce/sink/chsink_test.Deployment] of partition deploys/0: each participant needs a name of its own
	// rows: 2 participants: 1
}
