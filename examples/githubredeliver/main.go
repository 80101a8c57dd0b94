// Command githubredeliver redelivers the failed deliveries of one GitHub
// webhook, because GitHub never does: run it beside the gateway (or as a
// mode of it), once from cron with -once, or as a loop.
//
//	GITHUB_TOKEN=... go run ./examples/githubredeliver -repo octo-org/app -hook 42 -state ./redeliver-state
//
// The token needs admin rights on the hook (admin:repo_hook or
// admin:org_hook, or a fine-grained token with Webhooks read and write). For
// a GitHub App's hook (-app), GITHUB_TOKEN holds the App's JWT.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/idempotency/githubredeliver"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "githubredeliver:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string) error {
	fs := flag.NewFlagSet("githubredeliver", flag.ContinueOnError)
	repo := fs.String("repo", "", "repository `owner/name` of the hook")
	org := fs.String("org", "", "organization of the hook")
	app := fs.Bool("app", false, "the GitHub App's hook (GITHUB_TOKEN holds the App's JWT)")
	hookID := fs.Int64("hook", 0, "hook id (with -repo or -org)")
	api := fs.String("api", githubredeliver.DefaultBaseURL, "REST API root (GitHub Enterprise Server: https://HOST/api/v3)")
	tokenEnv := fs.String("token-env", "GITHUB_TOKEN", "environment variable holding the token")
	stateDir := fs.String("state", "", "directory keeping the cursor and pending GUIDs (default: memory, a restart examines the last 3 days again)")
	once := fs.Bool("once", false, "run one pass and exit")
	interval := fs.Duration("interval", githubredeliver.DefaultInterval, "pause between passes")
	if err := fs.Parse(args); err != nil {
		return err
	}

	var hook githubredeliver.Hook
	switch {
	case *app && *repo == "" && *org == "":
		hook = githubredeliver.AppHook()
	case *repo != "" && *org == "" && !*app && *hookID > 0:
		owner, name, ok := strings.Cut(*repo, "/")
		if !ok || owner == "" || name == "" {
			return fmt.Errorf("-repo %q: want owner/name", *repo)
		}
		hook = githubredeliver.RepoHook(owner, name, *hookID)
	case *org != "" && *repo == "" && !*app && *hookID > 0:
		hook = githubredeliver.OrgHook(*org, *hookID)
	default:
		return errors.New("name one hook: -repo owner/name -hook ID, -org NAME -hook ID, or -app")
	}
	token := getenv(*tokenEnv)
	if token == "" {
		return fmt.Errorf("$%s is empty", *tokenEnv)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	opts := githubredeliver.Options{Token: token, BaseURL: *api, Interval: *interval, Logger: logger}
	if *stateDir != "" {
		storage, err := checkpoint.NewFSStorage(*stateDir)
		if err != nil {
			return err
		}
		opts.State = githubredeliver.CheckpointState{Storage: storage, Name: "githubredeliver" + strings.ReplaceAll(hook.String(), "/", "_")}
	}
	r, err := githubredeliver.New(hook, opts)
	if err != nil {
		return err
	}
	if !*once {
		return r.Run(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	res, err := r.Pass(ctx)
	logger.Info("pass", "listed", res.Listed, "redelivered", res.Redelivered, "waiting", res.Waiting,
		"succeeded", res.Succeeded, "rejected", res.Rejected, "expired", res.Expired)
	if len(res.Expired) > 0 && err == nil {
		err = fmt.Errorf("%d failed deliveries left GitHub's 3-day window unrecovered: %v", len(res.Expired), res.Expired)
	}
	return err
}
