package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/idempotency/redisstore"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// Two gateway instances share one Redis: the second sees the first's claim,
// then its stored response.
func Example() {
	ctx := context.Background()
	srv, err := testkit.StandaloneRedis(ctx) // your Redis in production
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()

	newInstance := func() (*redisstore.Store, func() error) {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		s, err := redisstore.New(rdb, redisstore.Options{Prefix: "example:"})
		if err != nil {
			panic(err)
		}
		return s, rdb.Close
	}
	a, closeA := newInstance()
	defer closeA()
	b, closeB := newInstance()
	defer closeB()

	c, err := a.Claim(ctx, "delivery-1", "fp", 30*time.Second)
	fmt.Println("a claims:", err)
	_, err = b.Claim(ctx, "delivery-1", "fp", 30*time.Second)
	fmt.Println("b claims:", err)
	fmt.Println("a completes:", a.Complete(ctx, c, idempotency.Response{Status: 202, Body: []byte("accepted")}, time.Hour))
	_, err = b.Claim(ctx, "delivery-1", "fp", 30*time.Second)
	var done *idempotency.DoneError
	if errors.As(err, &done) {
		fmt.Printf("b replays: %d %s\n", done.Record.Response.Status, done.Record.Response.Body)
	}
	// Output:
	// a claims: <nil>
	// b claims: idempotency: key is pending
	// a completes: <nil>
	// b replays: 202 accepted
}
