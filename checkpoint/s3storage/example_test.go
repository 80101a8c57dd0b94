package s3storage_test

import (
	"context"
	"errors"
	"log"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/s3storage"
)

// Claim an epoch by creating its owner record: of all the instances that
// try, on any machine, exactly one succeeds.
func Example() {
	ctx := context.Background()
	client := s3storage.NewClient(s3storage.ClientConfig{
		Endpoint:    "http://127.0.0.1:7070",
		AccessKeyID: "id", SecretAccessKey: "secret",
	})
	storage, err := s3storage.New(client, "pipeline", s3storage.Options{Prefix: "prod/"})
	if err != nil {
		log.Fatal(err)
	}
	_, err = storage.Create(ctx, "owners/orders-3/epoch-0000000008", []byte("instance b"))
	switch {
	case err == nil:
		// this instance owns epoch 8
	case errors.Is(err, checkpoint.ErrConflict):
		// another instance owns it: stand down
	case errors.Is(err, s3storage.ErrOutcomeUnknown):
		// read the record back before deciding
	default:
		// certainly not created: retry later
	}
}
