package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	os.Exit(run())
}

func run() int {
	port := flag.Int("port", 0, "port to listen on, on 127.0.0.1")
	dataDir := flag.String("data-dir", "", "persistence directory (empty: memory only)")
	syncWrites := flag.Bool("sync", false, "fsync every produced batch")
	minSession := flag.Duration("min-session-timeout", 0, "smallest consumer-group session timeout accepted (0: kfake's default, 6s)")
	flag.Parse()

	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(*port),
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
	fmt.Println("ready", c.ListenAddrs()[0])

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	<-sigs
	c.Close()
	return 0
}
