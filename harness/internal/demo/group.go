package demo

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/internal/kafkawire"
)

// Group is a consumer group as the harness watches it, under either
// protocol: the classic one (DescribeGroups) or the consumer one (KIP-848,
// ConsumerGroupDescribe).
type Group struct {
	// State is Stable when no rebalance is under way, under either
	// protocol; see Rebalancing.
	State   string
	Members []GroupMember // sorted by ID
}

// GroupMember is one member of a Group.
type GroupMember struct {
	ID       string
	Assigned map[string]int // partitions by topic
}

// Rebalancing reports whether the group is moving partitions: the classic
// protocol's PreparingRebalance and CompletingRebalance, the consumer
// protocol's Assigning and Reconciling.
func (g Group) Rebalancing() bool {
	switch g.State {
	case "PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling":
		return true
	}
	return false
}

// IDs returns the members' ids, sorted.
func (g Group) IDs() []string {
	ids := make([]string, len(g.Members))
	for i, m := range g.Members {
		ids[i] = m.ID
	}
	return ids
}

// AssignedOf returns how many partitions of topic the members hold.
func (g Group) AssignedOf(topic string) int {
	n := 0
	for _, m := range g.Members {
		n += m.Assigned[topic]
	}
	return n
}

// DescribeGroup describes group, joined under the consumer group protocol
// if consumer is set, else under the classic one.
func DescribeGroup(ctx context.Context, brokers []string, group string, consumer bool) (Group, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var g Group
	if consumer {
		conn := &kafkawire.GroupConn{Dialer: &kafka.Dialer{Timeout: 2 * time.Second}, Brokers: brokers, GroupID: group}
		defer conn.Close()
		d, err := conn.Describe(ctx)
		if err != nil {
			return g, err
		}
		if d.ErrorCode != 0 {
			return g, fmt.Errorf("describe group %s: %w", group, kafka.Error(d.ErrorCode))
		}
		g.State = d.State
		for _, m := range d.Members {
			g.Members = append(g.Members, GroupMember{ID: m.MemberID, Assigned: m.AssignedByTopic})
		}
	} else {
		client, closeClient := KafkaClient(brokers, 2*time.Second)
		defer closeClient()
		resp, err := client.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{group}})
		if err != nil {
			return g, err
		}
		if len(resp.Groups) != 1 {
			return g, fmt.Errorf("describe group %s: %d groups in the answer", group, len(resp.Groups))
		}
		rg := resp.Groups[0]
		if rg.Error != nil {
			return g, fmt.Errorf("describe group %s: %w", group, rg.Error)
		}
		g.State = rg.GroupState
		for _, m := range rg.Members {
			gm := GroupMember{ID: m.MemberID, Assigned: map[string]int{}}
			for _, t := range m.MemberAssignments.Topics {
				gm.Assigned[t.Topic] += len(t.Partitions)
			}
			g.Members = append(g.Members, gm)
		}
	}
	slices.SortFunc(g.Members, func(a, b GroupMember) int { return strings.Compare(a.ID, b.ID) })
	return g, nil
}
