// Package kafkajava runs Kafka's own Java clients and tools
// (org.apache.kafka:kafka-clients and kafka-tools from Maven Central) for
// the tests that check the SDK against code nobody here wrote: the Java
// consumer reading what the SDK's producers and sinks wrote, a Java
// transactional producer writing what the SDK's readers read, and Kafka's
// own transaction and group tools describing the SDK's ids and groups.
//
// The Java side is one small program (java/, one Main with modes), built
// with Maven into the cache the first time (embedded.EnsureMavenProject;
// make deps builds it ahead), never into the tree. Bytes cross the pipe as
// fields: N for null, B followed by base64 (B alone: empty), so null and
// empty stay apart.
package kafkajava

import (
	"bufio"
	"bytes"
	"context"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os/exec"
	"strconv"
	"strings"

	"github.com/exactlyonce/exactlyonce/internal/embedded"
)

//go:embed java/pom.xml java/src/main/java/interop/Main.java
var source embed.FS

// Main is the class of the program's modes.
const Main = "interop.Main"

// Tool classes of kafka-tools on the program's classpath, run as
// kafka-transactions.sh and kafka-consumer-groups.sh run them.
const (
	TransactionsCommand  = "org.apache.kafka.tools.TransactionsCommand"
	ConsumerGroupCommand = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
)

// jvmOptions start a client quickly and small, as the brokers'.
var jvmOptions = []string{
	"-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
	"-Djava.awt.headless=true", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
}

// Program is the built Java program.
type Program struct {
	java, classpath string
}

// Build returns the program, building it with Maven into the cache the
// first time (a minute or two; progress lines go to progress). The error
// wraps embedded.ErrNotInstalled when java or mvn is missing.
func Build(ctx context.Context, progress io.Writer) (*Program, error) {
	java, err := embedded.JavaPath()
	if err != nil {
		return nil, fmt.Errorf("kafkajava: %w", err)
	}
	src, err := fs.Sub(source, "java")
	if err != nil {
		return nil, fmt.Errorf("kafkajava: %w", err)
	}
	cp, err := embedded.EnsureMavenProject(ctx, "", "kafka-interop", src, progress)
	if err != nil {
		return nil, fmt.Errorf("kafkajava: %w", err)
	}
	return &Program{java: java, classpath: cp}, nil
}

// Command returns the command that runs class's main with args.
func (p *Program) Command(ctx context.Context, class string, args ...string) *exec.Cmd {
	argv := append(append(append([]string{}, jvmOptions...), "-cp", p.classpath, class), args...)
	return exec.CommandContext(ctx, p.java, argv...)
}

// Run runs class's main with args and returns its standard output; an exit
// other than 0 is an error carrying standard error.
func (p *Program) Run(ctx context.Context, stdin string, class string, args ...string) (string, error) {
	cmd := p.Command(ctx, class, args...)
	var out, errb bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kafkajava: %s %s: %w\n%s%s", class, strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String(), nil
}

// Header is a record header.
type Header struct {
	Key   string
	Value []byte
}

// Record is a record as the Java consumer read it, or as the Java producer
// is to write it (Partition and Offset are the consumer's).
type Record struct {
	Partition  int
	Offset     int64
	Key, Value []byte
	Headers    []Header
}

// Consume reads every partition of topic with the Java consumer, from the
// start to the end offsets (the last stable offsets with readCommitted:
// isolation.level=read_committed; else read_uncommitted), in partition
// then offset order.
func (p *Program) Consume(ctx context.Context, brokers []string, topic string, readCommitted bool) ([]Record, error) {
	iso := "read_uncommitted"
	if readCommitted {
		iso = "read_committed"
	}
	out, err := p.Run(ctx, "", Main, "consume", strings.Join(brokers, ","), topic, iso)
	if err != nil {
		return nil, err
	}
	var recs []Record
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || len(f)%2 != 0 {
			return nil, fmt.Errorf("kafkajava: consume: bad line %q", sc.Text())
		}
		var r Record
		part, err1 := strconv.Atoi(f[0])
		off, err2 := strconv.ParseInt(f[1], 10, 64)
		key, err3 := decode(f[2])
		val, err4 := decode(f[3])
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			return nil, fmt.Errorf("kafkajava: consume: line %q: %w", sc.Text(), err)
		}
		r.Partition, r.Offset, r.Key, r.Value = part, off, key, val
		for i := 4; i < len(f); i += 2 {
			k, err1 := decode(f[i])
			v, err2 := decode(f[i+1])
			if err := errors.Join(err1, err2); err != nil {
				return nil, fmt.Errorf("kafkajava: consume: line %q: %w", sc.Text(), err)
			}
			r.Headers = append(r.Headers, Header{Key: string(k), Value: v})
		}
		recs = append(recs, r)
	}
	return recs, sc.Err()
}

// Step is one line of a Produce script.
type Step struct {
	// Op is "begin", "commit" or "abort" (the transactional producer's
	// transaction), or "tx" or "plain": send Record to Topic's partition
	// Record.Partition with the transactional producer or with a plain
	// idempotent one. Each send is acknowledged before the next step.
	Op     string
	Topic  string
	Record Record
}

// Produce runs script with a Java transactional producer of txid and a
// plain idempotent producer, both compressing with codec (none, gzip,
// snappy, lz4 or zstd).
func (p *Program) Produce(ctx context.Context, brokers []string, txid, codec string, script []Step) error {
	var b strings.Builder
	for _, s := range script {
		switch s.Op {
		case "begin", "commit", "abort":
			b.WriteString(s.Op)
		case "tx", "plain":
			fmt.Fprintf(&b, "%s %s %d %s %s", s.Op, s.Topic, s.Record.Partition, encode(s.Record.Key), encode(s.Record.Value))
			for _, h := range s.Record.Headers {
				fmt.Fprintf(&b, " %s %s", encode([]byte(h.Key)), encode(h.Value))
			}
		default:
			return fmt.Errorf("kafkajava: produce: unknown step %q", s.Op)
		}
		b.WriteByte('\n')
	}
	out, err := p.Run(ctx, b.String(), Main, "produce", strings.Join(brokers, ","), txid, codec)
	if err != nil {
		return err
	}
	if strings.TrimSpace(out) != "ok" {
		return fmt.Errorf("kafkajava: produce: unexpected output %q", out)
	}
	return nil
}

func encode(b []byte) string {
	if b == nil {
		return "N"
	}
	return "B" + base64.StdEncoding.EncodeToString(b)
}

func decode(f string) ([]byte, error) {
	if f == "N" {
		return nil, nil
	}
	s, ok := strings.CutPrefix(f, "B")
	if !ok {
		return nil, fmt.Errorf("field %q: want N or B<base64>", f)
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if b == nil {
		b = []byte{}
	}
	return b, err
}
