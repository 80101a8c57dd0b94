package demo

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/exactlyonce/exactlyonce/audit/chaudit"
	"github.com/exactlyonce/exactlyonce/examples/devmetrics"
	"github.com/exactlyonce/exactlyonce/internal/embedded"
)

// StartServers starts ClickHouse and Kafka, embedded unless the environment
// names real ones, builds the binaries, and creates the topics and the
// tables.
func (d *Pipeline) StartServers(ctx context.Context) error {
	d.Dir = d.Config.Dir
	if d.Dir == "" {
		var err error
		if d.Dir, err = os.MkdirTemp("", "exactlyonce-demo-"); err != nil {
			return err
		}
		d.Cleanups = append(d.Cleanups, func() { os.RemoveAll(d.Dir) })
	}
	if d.Config.LogDir != "" {
		d.logs = &Logs{Dir: d.Config.LogDir, Terminal: os.Stderr, Verbose: d.Config.Verbose}
		d.Cleanups = append(d.Cleanups, func() { _ = d.logs.Close() }) // after the processes, cleanups run last to first
	}
	built := make(chan error, 1)
	d.Binaries = d.Config.Binaries
	if d.Binaries == (Binaries{}) {
		go func() {
			var err error
			d.Binaries, err = BuildBinaries(ctx, filepath.Join(d.Dir, "bin"))
			built <- err
		}()
	} else {
		built <- nil
	}
	srv, err := StartServers(ctx, d.Dir, d.Config.Kafka, d.Say)
	if err != nil {
		<-built
		return err
	}
	d.Servers = srv
	d.Cleanups = append(d.Cleanups, srv.Stop)
	if err := <-built; err != nil {
		return err
	}
	d.Say("gateway and processor: the binaries of examples/gateway and examples/processor (-pipeline devmetrics) in %s", filepath.Dir(d.Binaries.Gateway))
	runID := fmt.Sprintf("%d", time.Now().UnixNano())
	d.Topic, d.DB = topic+"_"+runID, "demo_"+runID
	d.DLQ = d.Topic + "_dlq"
	if err := embedded.CreateTopic(ctx, srv.Brokers, d.Topic, d.Config.Partitions); err != nil {
		return err
	}
	if err := embedded.CreateTopic(ctx, srv.Brokers, d.DLQ, 1); err != nil {
		return err
	}
	if err := embedded.CreateTopic(ctx, srv.Brokers, d.AuditTopic(), d.Config.Partitions); err != nil { // audit.go
		return err
	}
	if err := devmetrics.CreateTables(ctx, ch.Options{Address: srv.ClickHouseAddr}, d.DB); err != nil {
		return err
	}
	if err := chaudit.CreateTable(ctx, ch.Options{Address: srv.ClickHouseAddr}, d.DB, chaudit.DefaultTable); err != nil { // audit.go
		return err
	}
	if len(d.naives) > 0 {
		if err := d.setUpNaive(ctx); err != nil {
			return err
		}
	}
	d.Say("database %s: normalized_events → mv_employee_metrics_hourly → employee_metrics_hourly, deployments and incidents (ReplacingMergeTree, read with FINAL), employee_metrics_window (window operator, ReplacingMergeTree by window)", d.DB)
	return nil
}

// Output returns where the process called name (gateway, processor-2)
// writes its log: a file of its own when Config.LogDir is set (see Logs),
// else os.Stderr.
func (d *Pipeline) Output(name string) io.Writer {
	if d.logs == nil {
		return os.Stderr
	}
	w, err := d.logs.Writer(name, fmt.Sprintf("%s started at %s", name, time.Now().UTC().Format(time.RFC3339Nano)))
	if err != nil {
		d.Say("the log of %s: %v; it goes to the terminal", name, err)
		return os.Stderr
	}
	return w
}

// createTopic creates a topic on the run's brokers.
func createTopic(ctx context.Context, brokers []string, topic string, partitions int) error {
	return embedded.CreateTopic(ctx, brokers, topic, partitions)
}

// LogLevel is the binaries' -log-level: info when their logs are kept in
// files (the terminal still shows only errors, or warnings with -v).
func (d *Pipeline) LogLevel() string {
	if d.Config.LogDir != "" {
		return "-log-level=info"
	}
	if d.Config.Verbose {
		return "-log-level=warn"
	}
	return "-log-level=error"
}

// startPipeline starts the gateway and the supervised stream processors.
func (d *Pipeline) startPipeline(ctx context.Context) error {
	// The idempotent producer: a produce retried after a lost
	// acknowledgement is dropped by the broker, not written twice.
	d.GatewayArgs = []string{"-pipeline=devmetrics", "-idempotent-producer", "-brokers=" + strings.Join(d.Servers.Brokers, ","),
		"-topic=" + d.Topic, "-retry-after=1s", d.LogLevel(), "-audit-topic=" + d.AuditTopic()}
	d.GatewayEnv = []string{"GITHUB_WEBHOOK_SECRET=" + WebhookSecret, "JIRA_WEBHOOK_SECRET=" + WebhookSecret}
	storeArgs, storeName, closeStore, err := keyStore(ctx, d.Config.Store)
	if err != nil {
		return err
	}
	d.GatewayArgs, d.storeName = append(d.GatewayArgs, storeArgs...), storeName
	d.Cleanups = append(d.Cleanups, closeStore)
	if err := d.StartGateway(ctx, d.Config.Faults); err != nil {
		return err
	}
	d.Say("gateway (examples/gateway, pid %d) listening on %s (idempotency keys in %s)", d.Gateway.PID(), d.Gateway.URL(), storeName)
	if d.hasNaive(devmetrics.NaiveGateway) {
		if err := d.startNaiveGateway(ctx); err != nil {
			return err
		}
	}
	// GitHub waits 10 s for an answer, then records the delivery as failed.
	d.Provider = &Provider{Client: &http.Client{Timeout: 10 * time.Second}, BaseURL: d.Gateway.URL()}
	if d.Config.KillKafka {
		// Jira retries for 30 minutes, 36 s here, but a broker's restart is
		// not compressed: at load 60 an Apache Kafka took longer than 36 s
		// to come back, and the gateway's 503s meanwhile ran the window out.
		d.Provider.JiraWindow = 5 * time.Minute
	}
	if err := d.StartGitHub(ctx); err != nil {
		return err
	}
	if d.Config.Faults {
		d.Provider.DupRate = 0.1
	}

	// The stream processor runs as its own process, so that it can be killed
	// with SIGKILL like a crashed pod. The supervisor restarts it.
	listen := "-listen=127.0.0.1:0"
	d.Supervisor = &Supervisor{Say: d.Say, Instances: d.Config.Instances, SharedGroup: d.Config.Instances > 1, Output: d.ProcessorOutput,
		Group: "aggregator-" + d.DB, Brokers: d.Servers.Brokers,
		Command: []string{d.Binaries.Processor, "-pipeline=devmetrics", listen,
			"-brokers=" + strings.Join(d.Servers.Brokers, ","), "-topic=" + d.Topic,
			"-clickhouse=" + d.Servers.ClickHouseAddr, "-database=" + d.DB, "-create-tables=false", "-dlq=" + d.DLQ,
			"-state-dir=" + filepath.Join(d.Dir, "processor", "state"),
			// Quick to notice a killed instance (kfake's smallest session
			// timeout is 6 s) and to insert: the demo lasts seconds.
			"-session-timeout=6s", "-rebalance-timeout=3s", "-heartbeat-interval=200ms", "-fetch-max-wait=100ms",
			"-sink-max-delay=200ms", d.LogLevel(), "-audit", "-audit-topic=" + d.AuditTopic(),
			// The classic protocol, whose session timeout is the flag
			// above: under the consumer protocol (the default where the
			// brokers offer it) it is the broker's, 45 s on kfake. make
			// chaos runs both.
			"-group-protocol=classic"}}
	var procNaive []string
	for _, n := range []devmetrics.Naive{devmetrics.NaiveSink, devmetrics.NaiveMV} {
		if d.hasNaive(n) {
			procNaive = append(procNaive, string(n))
		}
	}
	if len(procNaive) > 0 {
		d.Supervisor.Command = append(d.Supervisor.Command, "-naive="+strings.Join(procNaive, ","))
	}
	s3Args, s3Env, err := d.StartCheckpointStore(ctx)
	if err != nil {
		return err
	}
	d.Supervisor.Command, d.Supervisor.Env = append(d.Supervisor.Command, s3Args...), s3Env
	supCtx, stopSup := context.WithCancel(ctx)
	supDone := make(chan struct{})
	go func() { defer close(supDone); d.Supervisor.Run(supCtx) }()
	d.Cleanups = append(d.Cleanups, func() { stopSup(); <-supDone })
	return nil
}

// StartGateway starts the next gateway process, with Kafka publish faults
// if faults is set. A gateway with keys in memory starts with none.
func (d *Pipeline) StartGateway(ctx context.Context, faults bool) error {
	args := d.GatewayArgs
	if faults {
		// Its own seed per incarnation: it draws in its HTTP handlers.
		args = append(slices.Clone(args), "-inject-publish-failures=0.03", fmt.Sprintf("-inject-seed=%d", d.Config.Seed+d.gwStarts))
		if d.Servers.Kfake == nil {
			// No broker to lose acknowledgements at the wire (only kfake
			// has the hook): the gateway loses them itself, after the
			// write (the retry writes again).
			args = append(args, "-inject-lost-acks=0.03")
		}
	}
	gw, err := StartGateway(ctx, d.Binaries.Gateway, args, d.GatewayEnv, d.Output("gateway"))
	if err != nil {
		return err
	}
	d.gwStarts++
	d.Gateway = gw
	d.Cleanups = append(d.Cleanups, func() { _ = gw.Stop() })
	return nil
}

// keyStore returns the gateway's flags for its idempotency store: keys in
// the gateway's memory, lost when it restarts, or in one Redis that
// outlives the gateways (REDIS_ADDR, or an embedded redis-server), under a
// prefix of this run's.
func keyStore(ctx context.Context, kind string) (args []string, name string, closeFn func(), err error) {
	switch kind {
	case "memory":
		return []string{"-store=memory"}, "memory", func() {}, nil
	case "redis":
		addr := os.Getenv("REDIS_ADDR")
		stop := func() {}
		if addr == "" {
			r, err := embedded.StartRedis(ctx, embedded.RedisOptions{})
			if err != nil {
				return nil, "", nil, fmt.Errorf("start Redis: %w", err)
			}
			addr, stop = r.Addr(), func() { _ = r.Stop() }
		}
		prefix := fmt.Sprintf("demo:%d:", time.Now().UnixNano())
		return []string{"-store=redis", "-redis=" + addr, "-redis-prefix=" + prefix}, "Redis at " + addr, stop, nil
	default:
		return nil, "", nil, fmt.Errorf("-store %q: want memory or redis", kind)
	}
}

// ProcessorOutput is a Supervisor.Output: processor-<instance>.
func (d *Pipeline) ProcessorOutput(instance int) io.Writer {
	return d.Output(fmt.Sprintf("processor-%d", instance))
}
