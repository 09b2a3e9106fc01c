// Command consumer848 is one franz-go member of a consumer group that uses the consumer
// group protocol of KIP-848 (ConsumerGroupHeartbeat; the broker assigns the partitions).
//
// It subscribes to one topic, reads from the start, and reports on stdout as it goes, one
// "name=value" line each: "assigned=<partitions>" whenever its assignment changes and
// "record=<partition>:<offset>" for every record. A line "commit" on stdin commits what it
// has read and prints "committed=<count of commits so far>" (or an error). When a line "stop"
// arrives (or stdin closes) it commits what it read since, leaves the group, prints
// "consumed=<count>",
// "partitions=<partitions ever assigned>", "errors=<count>" (each error also as an
// "error=<text>" line) and exits. franz-go's own log goes to stderr.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// member is what this process knows of its membership; the franz-go callbacks and the poll
// loop both update it.
type member struct {
	mu       sync.Mutex
	topic    string
	current  map[int32]bool
	ever     map[int32]bool
	consumed int
	errors   []string
}

func (m *member) say(format string, args ...any) {
	fmt.Printf(format+"\n", args...)
}

func list(set map[int32]bool) string {
	parts := make([]int, 0, len(set))
	for p := range set {
		parts = append(parts, int(p))
	}
	slices.Sort(parts)
	texts := make([]string, len(parts))
	for i, p := range parts {
		texts[i] = strconv.Itoa(p)
	}
	return strings.Join(texts, ",")
}

func (m *member) change(partitions map[string][]int32, add bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range partitions[m.topic] {
		if add {
			m.current[p] = true
			m.ever[p] = true
		} else {
			delete(m.current, p)
		}
	}
	m.say("assigned=%s", list(m.current))
}

func (m *member) fail(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.errors = append(m.errors, err.Error())
	m.say("error=%s", strings.ReplaceAll(err.Error(), "\n", " "))
}

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "bootstrap servers, comma separated")
	group := flag.String("group", "", "consumer group id")
	topic := flag.String("topic", "", "topic to consume")
	clientID := flag.String("client-id", "consumer848", "client.id")
	assignor := flag.String("assignor", "uniform", "server-side assignor: uniform or range")
	flag.Parse()
	if *group == "" || *topic == "" {
		fmt.Fprintln(os.Stderr, "consumer848: -group and -topic are required")
		os.Exit(2)
	}
	// franz-go picks the server-side assignor from its first balancer: the sticky
	// balancer asks for "uniform", the range balancer for "range".
	var balancer kgo.GroupBalancer
	switch *assignor {
	case "uniform":
		balancer = kgo.CooperativeStickyBalancer()
	case "range":
		balancer = kgo.RangeBalancer()
	default:
		fmt.Fprintf(os.Stderr, "consumer848: unknown assignor %q\n", *assignor)
		os.Exit(2)
	}

	m := &member{topic: *topic, current: map[int32]bool{}, ever: map[int32]bool{}}
	client, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(*brokers, ",")...),
		kgo.ClientID(*clientID),
		kgo.ConsumerGroup(*group),
		kgo.ConsumeTopics(*topic),
		kgo.Balancers(balancer),
		kgo.ServerSideBalancer(),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, p map[string][]int32) {
			m.change(p, true)
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, p map[string][]int32) {
			m.change(p, false)
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, p map[string][]int32) {
			m.change(p, false)
		}),
		kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelInfo, nil)),
	)
	if err != nil {
		fmt.Printf("errors=1\nerror=%s\n", err)
		os.Exit(1)
	}

	ctx, stop := context.WithCancel(context.Background())
	go func() {
		commits := 0
		lines := bufio.NewScanner(os.Stdin)
		for lines.Scan() {
			switch strings.TrimSpace(lines.Text()) {
			case "commit":
				// Safe beside the poll loop: franz-go's commits are goroutine-safe.
				commitCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				err := client.CommitUncommittedOffsets(commitCtx)
				cancel()
				if err != nil {
					m.fail(fmt.Errorf("commit: %w", err))
				} else {
					commits++
					m.mu.Lock()
					m.say("committed=%d", commits)
					m.mu.Unlock()
				}
			case "stop":
				stop()
				return
			}
		}
		stop()
	}()

	for ctx.Err() == nil {
		fetches := client.PollFetches(ctx)
		fetches.EachError(func(t string, p int32, err error) {
			if err != context.Canceled {
				m.fail(fmt.Errorf("fetch %s[%d]: %w", t, p, err))
			}
		})
		fetches.EachRecord(func(r *kgo.Record) {
			m.mu.Lock()
			m.consumed++
			m.say("record=%d:%d", r.Partition, r.Offset)
			m.mu.Unlock()
		})
	}

	commitCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	if err := client.CommitUncommittedOffsets(commitCtx); err != nil {
		m.fail(fmt.Errorf("commit: %w", err))
	}
	cancel()
	client.Close() // leaves the group (a heartbeat with member epoch -1)

	m.mu.Lock()
	defer m.mu.Unlock()
	m.say("consumed=%d", m.consumed)
	m.say("partitions=%s", list(m.ever))
	m.say("errors=%d", len(m.errors))
}
