package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/exactlyonce/exactlyonce/internal/embedded/kafkafault"
)

func main() {
	os.Exit(run())
}

func run() int {
	port := flag.Int("port", 0, "port to listen on, on 127.0.0.1")
	dataDir := flag.String("data-dir", "", "persistence directory (empty: memory only)")
	syncWrites := flag.Bool("sync", false, "fsync every produced batch")
	minSession := flag.Duration("min-session-timeout", 0, "smallest consumer-group session timeout accepted (0: kfake's default, 6s)")
	expire := flag.Bool("expire-members", false, "expire consumer-group members silent for their session timeout, which kfake misses for a member that died while joining (kafkafault.ExpireMembers)")
	control := flag.String("control", "127.0.0.1:0", "address of the HTTP fault-injection endpoint (empty: none)")
	flag.Parse()

	inj := kafkafault.New()
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(*port),
		kfake.ListenFn(inj.Listen),
	}
	if *dataDir != "" {
		opts = append(opts, kfake.DataDir(*dataDir))
	}
	if *syncWrites {
		opts = append(opts, kfake.SyncWrites())
	}
	if *minSession > 0 {
		opts = append(opts, kfake.GroupMinSessionTimeout(*minSession))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kfakeserver:", err)
		return 1
	}
	inj.Attach(c)
	if *control != "" {
		ln, err := net.Listen("tcp", *control)
		if err != nil {
			fmt.Fprintln(os.Stderr, "kfakeserver: control endpoint:", err)
			c.Close()
			return 1
		}
		srv := &http.Server{Handler: inj.Handler(), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				fmt.Fprintln(os.Stderr, "kfakeserver: control endpoint:", err)
			}
		}()
		defer srv.Close()
		// Printed before "ready", so a parent that saw "ready" has it.
		fmt.Println("control http://" + ln.Addr().String())
	}
	if *expire {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = inj.ExpireMembers(ctx, c.ListenAddrs(), kafkafault.ExpireOptions{})
		}()
		defer func() { cancel(); <-done }()
	}
	fmt.Println("ready", c.ListenAddrs()[0])

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	<-sigs
	c.Close()
	return 0 // the deferred calls stop the control endpoint and the expiry
}
