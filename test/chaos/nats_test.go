//go:build linux

package chaos

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/locateanything/detect/jobs"
)

// TestNATSKill9AndRestart: the external nats-server dies with kill -9 mid-run and comes
// back on the same port with the same store. The worker rides it out (reconnect, retries,
// redelivery); the publisher keeps publishing across the outage. Bounded: 60 jobs, one
// kill, 2 s down; full: 400 jobs, three kills, 10 s down each.
func TestNATSKill9AndRestart(t *testing.T) {
	s := newScene(t)
	n := startNATS(t, s.ps, s.dir)
	w := s.worker("w1", map[string]string{"LA_NATS_URL": n.url()})
	w.start(t)
	s.connect(n.url())
	per := size.jobs / (size.kills + 1)
	s.mustPublishGood("nk", 0, per)
	for k := 1; k <= size.kills; k++ {
		s.waitResults(k*per-per/2, 3*time.Minute)
		published := make(chan error, 1)
		go func() { published <- s.publishGood("nk", k*per, (k+1)*per) }() // across the outage
		n.kill9(t)
		time.Sleep(size.natsDown)
		n.start(t)
		if err := <-published; err != nil {
			t.Fatal(err)
		}
	}
	s.account(3 * time.Minute)
	w.checkLog(t)
}

// TestClusterLosesANodeThenTheLeader: a 3-node JetStream cluster of external nats-server
// processes, every stream and the state bucket with three replicas (LA_REPLICAS=3). Mid-run
// a follower of LA_JOBS dies (kill -9) and comes back; then the leader of LA_JOBS dies and
// comes back (the full form then also kills the leaders of the state bucket and of
// LA_RESULTS). Jobs are published throughout. Bounded: 60 jobs; full: 400.
func TestClusterLosesANodeThenTheLeader(t *testing.T) {
	s := newScene(t)
	nodes := startCluster(t, s.ps, s.dir, 3)
	urls := clusterURLs(nodes)
	w := s.worker("w1", map[string]string{"LA_NATS_URL": urls, "LA_REPLICAS": "3"})
	w.start(t)
	s.connect(urls)
	ctx := context.Background()
	if info, err := s.c.js.Stream(ctx, jobs.JobsStream); err != nil || info.CachedInfo().Config.Replicas != 3 {
		t.Fatalf("LA_JOBS: %v; want 3 replicas", err)
	}

	// Each fault names the stream whose follower or leader dies.
	type fault struct {
		stream string
		leader bool
	}
	faults := []fault{{jobs.JobsStream, false}, {jobs.JobsStream, true}}
	if fullForm() {
		faults = append(faults, fault{"KV_" + jobs.StateBucket, true}, fault{jobs.ResultsStream, true})
	}
	per := size.jobs / (len(faults) + 1)
	s.mustPublishGood("cl", 0, per)
	for k, f := range faults {
		s.waitResults(k*per+per/2, 3*time.Minute)
		victim := s.clusterNode(nodes, f.stream, f.leader)
		published := make(chan error, 1)
		go func() { published <- s.publishGood("cl", (k+1)*per, (k+2)*per) }()
		t.Logf("%s loses its %s", f.stream, map[bool]string{true: "leader", false: "follower"}[f.leader])
		victim.kill9(t)
		s.waitResults((k+1)*per, 3*time.Minute) // the two left keep the queue going
		victim.start(t)
		if err := <-published; err != nil {
			t.Fatal(err)
		}
		s.waitReplicasCurrent(nodes)
	}
	s.account(3 * time.Minute)
	w.checkLog(t)
}

// clusterNode is the node that leads stream (leader) or one that follows it.
func (s *scene) clusterNode(nodes []*natsNode, stream string, leader bool) *natsNode {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := s.c.js.Stream(ctx, stream)
	if err != nil || info.CachedInfo().Cluster == nil {
		s.t.Fatalf("stream %s: %v", stream, err)
	}
	name := info.CachedInfo().Cluster.Leader
	if !leader {
		replicas := info.CachedInfo().Cluster.Replicas
		if len(replicas) == 0 {
			s.t.Fatalf("stream %s has no followers", stream)
		}
		name = replicas[0].Name
	}
	for _, n := range nodes {
		if n.name == name {
			return n
		}
	}
	s.t.Fatalf("stream %s: no node named %q", stream, name)
	return nil
}

// waitReplicasCurrent waits until every stream of the topology has a leader and all its
// replicas are online and current, so the next fault does not take the quorum.
func (s *scene) waitReplicasCurrent(nodes []*natsNode) {
	s.t.Helper()
	streams := []string{jobs.JobsStream, jobs.ResultsStream, jobs.DLQStream, "KV_" + jobs.StateBucket}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := replicasCurrent(s.c, streams, len(nodes))
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("the cluster did not recover: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func replicasCurrent(c *client, streams []string, size int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for _, name := range streams {
		info, err := c.js.Stream(ctx, name)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		cl := info.CachedInfo().Cluster
		if cl == nil || cl.Leader == "" {
			return fmt.Errorf("%s: no leader", name)
		}
		if len(cl.Replicas) != size-1 {
			return fmt.Errorf("%s: %d followers, want %d", name, len(cl.Replicas), size-1)
		}
		for _, r := range cl.Replicas {
			if !r.Current || r.Offline {
				return fmt.Errorf("%s: replica %s current=%v offline=%v", name, r.Name, r.Current, r.Offline)
			}
		}
	}
	return nil
}
