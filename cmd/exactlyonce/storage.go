package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/s3storage"
)

// errReadOnly is what every write of the commands' storage returns: the
// commands only read.
var errReadOnly = errors.New("exactlyonce: read-only: this command does not write to the checkpoint storage")

// storageFlags are the processor's: -state-dir, or -s3-bucket with the S3
// environment, and the checkpoint prefix.
type storageFlags struct {
	stateDir, bucket, prefix, endpoint, region string
	ckptPrefix                                 string
}

func (s *storageFlags) register(fs *flag.FlagSet, env func(string) string) {
	fs.StringVar(&s.stateDir, "state-dir", env("PROCESSOR_STATE_DIR"), "the processor's -state-dir (PROCESSOR_STATE_DIR)")
	fs.StringVar(&s.bucket, "s3-bucket", env("S3_BUCKET"), "the processor's -s3-bucket instead of -state-dir (S3_BUCKET; credentials from S3_ACCESS_KEY_ID, S3_SECRET_ACCESS_KEY)")
	fs.StringVar(&s.prefix, "s3-prefix", env("S3_PREFIX"), "object name prefix in -s3-bucket (S3_PREFIX)")
	fs.StringVar(&s.endpoint, "s3-endpoint", env("S3_ENDPOINT"), "S3-compatible server URL (S3_ENDPOINT)")
	fs.StringVar(&s.region, "s3-region", envOr(env, "S3_REGION", "us-east-1"), "S3 region (S3_REGION)")
	fs.StringVar(&s.ckptPrefix, "checkpoint-prefix", checkpoint.DefaultPrefix, "the checkpoint store's prefix (checkpoint.StoreOptions.Prefix)")
}

// open returns the storage, read-only.
func (s *storageFlags) open(env func(string) string) (checkpoint.Storage, error) {
	return s.openStorage(env, false)
}

// openStorage returns the storage the flags name; unless writable, every
// write to it fails with errReadOnly (and a directory is opened on a file
// system that writes nothing).
func (s *storageFlags) openStorage(env func(string) string, writable bool) (checkpoint.Storage, error) {
	switch {
	case s.stateDir != "" && s.bucket != "":
		return nil, errors.New("-state-dir and -s3-bucket: give one")
	case s.bucket != "":
		client := s3storage.NewClient(s3storage.ClientConfig{Endpoint: s.endpoint, Region: s.region,
			AccessKeyID: env("S3_ACCESS_KEY_ID"), SecretAccessKey: env("S3_SECRET_ACCESS_KEY")})
		st, err := s3storage.New(client, s.bucket, s3storage.Options{Prefix: s.prefix})
		if err != nil {
			return nil, fmt.Errorf("-s3-bucket: %w", err)
		}
		if writable {
			return st, nil
		}
		return readOnly{st}, nil
	case s.stateDir != "":
		info, err := os.Stat(s.stateDir)
		if err != nil {
			return nil, fmt.Errorf("-state-dir: %w", err)
		}
		if !info.IsDir() {
			return nil, fmt.Errorf("-state-dir %s: not a directory", s.stateDir)
		}
		if writable {
			st, err := checkpoint.NewFSStorage(s.stateDir)
			if err != nil {
				return nil, fmt.Errorf("-state-dir: %w", err)
			}
			return st, nil
		}
		st, err := checkpoint.NewFSStorageOn(readOnlyFS{}, s.stateDir)
		if err != nil {
			return nil, fmt.Errorf("-state-dir: %w", err)
		}
		return readOnly{st}, nil
	}
	return nil, errors.New("-state-dir or -s3-bucket is required")
}

// readOnly is a Storage whose writes fail with errReadOnly.
type readOnly struct{ checkpoint.Storage }

func (readOnly) Put(context.Context, string, []byte) error { return errReadOnly }
func (readOnly) Delete(context.Context, string) error      { return errReadOnly }
func (readOnly) Create(context.Context, string, []byte) (checkpoint.Version, error) {
	return "", errReadOnly
}
func (readOnly) Replace(context.Context, string, []byte, checkpoint.Version) (checkpoint.Version, error) {
	return "", errReadOnly
}

// readOnlyFS is the operating system's filesystem without its writes, so
// that FSStorage neither creates the directory nor removes a writer's
// temporary files (it would remove only a dead writer's, but an operator's
// look changes nothing).
type readOnlyFS struct{ checkpoint.OSFS }

func (readOnlyFS) MkdirAll(dir string) error {
	if _, err := os.Stat(dir); err != nil {
		return err
	}
	return nil
}
func (readOnlyFS) CreateTemp(string, string) (checkpoint.File, error) { return nil, errReadOnly }
func (readOnlyFS) Rename(string, string) error                        { return errReadOnly }
func (readOnlyFS) Link(string, string) error                          { return errReadOnly }
func (readOnlyFS) Remove(string) error                                { return errReadOnly }
func (readOnlyFS) SyncDir(string) error                               { return nil }
func (readOnlyFS) Lock(string) (func(), error)                        { return nil, errReadOnly }
func (readOnlyFS) LockTemp(string) (func(), error)                    { return nil, fs.ErrPermission }
